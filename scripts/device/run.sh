# On the device machine: unpack TensorFlow (once), then scripts/bench_bigw.py; results in $OUT.
# BIGW_ARGS: bench_bigw's options (default: the deep MLP at 1 Gbit/s, W = 2,4,8,12,16;
# --mode ring: docs/preregistered/issue22-ring-device.md).
G=/tmp/gw; bash .dev/sh/setup.sh
# run from the checkout without installing: gradwire's subpackages live beside it (pyproject's
# package-dir), so link them in (the repository copy is re-synced each call)
for p in collector aligner replay; do ln -sfn ../$p gradwire/$p; done
export PATH=$G/bin:$PATH PYTHONPATH=$G/site:$PWD PYTHONUNBUFFERED=1
if [ ! -d $G/site/tensorflow ]; then cat $G/parts/tf.part.* | xz -dc -T4 | tar -x -C $G/site; fi
python3 -c "import tensorflow as tf, tf_keras, cvxpy, hpack; print('tf', tf.__version__)" || exit 3
python3 scripts/bench_bigw.py --out $G/bigw ${BIGW_ARGS:---deadline-s 330} 2>&1 | tee $OUT/bigw.log
cd $G/bigw && cp bigw.md bigw.json $OUT/ 2>/dev/null
tar czf $OUT/runs.tgz --exclude='*/profile/ps0' --exclude='*/profile/worker0' --exclude='*/logs' .
