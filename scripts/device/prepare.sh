#!/usr/bin/env bash
# Prepare, on this machine, what a lent device machine (docs/notes/issue21-device-bigw.md) needs
# for the lab and that its image lacks, into .dev/ (ignored by git; 64 MiB travel per call):
#   .dev/tfA .dev/tfB .dev/tfC  TensorFlow-cpu for Python 3.12, headers left out, xz, in 3 parts
#   .dev/whl                    cvxpy's solvers, hpack, tf_keras, keras and TF's small pure deps
#   .dev/deb                    iproute2 and tcpdump with their libraries (Debian bookworm)
#   .dev/sh                     setup.sh and run.sh (copied from scripts/device/)
# Each call carries at most the tracked tree (~32 MB, of which ~28 MB sample captures) plus one
# part: move the six capture.pcapng files aside while the parts travel (git checkout restores).
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qs '^/.dev/' .git/info/exclude || { mkdir -p .git/info; echo /.dev/ >> .git/info/exclude; }
mkdir -p .dev/whl .dev/deb .dev/sh .dev/tfA .dev/tfB .dev/tfC
cp scripts/device/setup.sh scripts/device/run.sh .dev/sh/
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
plat=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q --no-deps "${plat[@]}" -d "$tmp" tensorflow-cpu==2.21.0
python3 -m pip download -q --no-deps "${plat[@]}" -d .dev/whl hpack==4.2.0 cvxpy==1.9.3 \
  clarabel==0.11.1 osqp==1.1.3 qdldl==0.1.9.post1 tf_keras==2.21.0 keras==3.15.1 namex==0.1.0 \
  optree==0.20.0 astunparse==1.6.3 gast==0.7.0 google-pasta==0.2.0 termcolor==3.3.0 \
  protobuf==7.36.2 ml_dtypes==0.6.0
(cd .dev/deb && apt-get download tcpdump libpcap0.8 iproute2 libbpf1 libelf1 libmnl0 \
  libxtables12 libcap2 libdb5.3 libbsd0 libmd0 libtirpc3 libgssapi-krb5-2 libkrb5-3 \
  libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2 libibverbs1 libnl-3-200 \
  libnl-route-3-200 libdbus-1-3 libsystemd0)
unzip -q "$tmp"/tensorflow_cpu-*.whl -d "$tmp/x"
tar -C "$tmp/x" --exclude=tensorflow/include -cf - . | xz -T2 -6 > "$tmp/tf.tar.xz"  # ~147 MB
# three parts of 37, 55 and the rest MB (dd: no pipe to break under pipefail)
dd if="$tmp/tf.tar.xz" of=.dev/tfA/tf.part.1 bs=1000000 count=37 status=none
dd if="$tmp/tf.tar.xz" of=.dev/tfB/tf.part.2 bs=1000000 skip=37 count=55 status=none
dd if="$tmp/tf.tar.xz" of=.dev/tfC/tf.part.3 bs=1000000 skip=92 status=none
cat .dev/tf?/tf.part.* | cmp - "$tmp/tf.tar.xz"
du -sh .dev/*
