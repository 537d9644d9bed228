"""Train a small local model forever with a TraceHook recording every step (for kill tests).

Usage: python hook_loop.py OUT_DIR [monitored|singular]
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

from gradwire import TraceHook  # noqa: E402

tf1 = tf.compat.v1
tf1.disable_eager_execution()
out, kind = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "monitored")
steps = int(os.environ.get("HOOK_LOOP_STEPS", "0")) or None
x = tf1.random.normal([64, 512])
w = tf1.get_variable("w", [512, 512])
loss = tf1.reduce_mean(tf1.matmul(x, w) ** 2)
train = tf1.train.GradientDescentOptimizer(0.01).minimize(
    loss, global_step=tf1.train.get_or_create_global_step())
hooks = [TraceHook(out, first_step=1, num_steps=None)]
config = tf1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
session = (tf1.train.MonitoredTrainingSession(hooks=hooks, config=config) if kind == "monitored"
           else tf1.train.SingularMonitoredSession(hooks=hooks, config=config))
with session as sess:
    n = 0
    while steps is None or n < steps:
        sess.run(train)
        n += 1
print("done", n)
