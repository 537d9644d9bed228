"""A minimal parameter-server training script with gradwire's two lines (marked below).

Run one process per task with TF_CONFIG set, e.g. for a 1-PS/1-worker cluster on loopback:

    TF_CONFIG='{"cluster": {"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223"]},
                "task": {"type": "ps", "index": 0}}' python examples/ps_train.py &
    TF_CONFIG='{... "task": {"type": "worker", "index": 0}}' \
        gradwire collect --out bundle/worker0 --iface lo -- python examples/ps_train.py

Options: --steps N (default 20), --width W (hidden width of the MLP, default 1024),
--first-step K and --record N (which steps the TraceHook records).
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

from gradwire import TraceHook  # noqa: E402  <- gradwire line 1

tf1 = tf.compat.v1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--first-step", type=int, default=3)
    ap.add_argument("--record", type=int, default=3)
    args = ap.parse_args()

    tf_config = json.loads(os.environ["TF_CONFIG"])
    task = tf_config["task"]
    cluster = tf.train.ClusterSpec(tf_config["cluster"])
    config = tf1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
    server = tf1.train.Server(cluster, job_name=task["type"], task_index=task["index"],
                              config=config)
    if task["type"] == "ps":
        server.join()
        return
    tf1.disable_eager_execution()
    worker = f"/job:worker/task:{task['index']}"
    with tf1.device(tf1.train.replica_device_setter(cluster=cluster, worker_device=worker)):
        x = tf1.random.normal([args.batch, 784])
        labels = tf1.random.uniform([args.batch], maxval=10, dtype=tf.int32)
        w1 = tf1.get_variable("w1", [784, args.width])
        b1 = tf1.get_variable("b1", [args.width], initializer=tf1.zeros_initializer())
        w2 = tf1.get_variable("w2", [args.width, 10])
        b2 = tf1.get_variable("b2", [10], initializer=tf1.zeros_initializer())
        logits = tf1.matmul(tf.nn.relu(tf1.matmul(x, w1) + b1), w2) + b2
        loss = tf1.losses.sparse_softmax_cross_entropy(labels, logits)
        step = tf1.train.get_or_create_global_step()
        train = tf1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=step)
    hooks = [TraceHook(first_step=args.first_step, num_steps=args.record,  # <- gradwire line 2
                       batch_size=args.batch)]
    with tf1.train.MonitoredTrainingSession(
        master=server.target, is_chief=task["index"] == 0, hooks=hooks, config=config
    ) as sess:
        for _ in range(args.steps):
            sess.run(train)
    print(f"worker {task['index']}: trained {args.steps} steps")


if __name__ == "__main__":
    main()
