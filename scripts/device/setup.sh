# On the device machine, from the repository copy: stage the carried part(s) of TensorFlow in
# /tmp/gw/parts; the first time .dev/deb is there, also probe the kernel (netns, bridge, veth,
# htb), wrap the carried iproute2/tcpdump for any the image lacks, and install .dev/whl.
G=/tmp/gw; mkdir -p $G/parts $G/site $G/bin $G/deb
for d in .dev/tfA .dev/tfB .dev/tfC; do [ -d $d ] && cp $d/* $G/parts/; done
ls -l $G/parts
L=$G/deb/lib/x86_64-linux-gnu:$G/deb/usr/lib/x86_64-linux-gnu
if [ -d .dev/deb ] && [ ! -f $G/setup.done ]; then touch $G/setup.done
  uname -r; nproc; python3 -V
  for f in .dev/deb/*.deb; do dpkg -x $f $G/deb; done
  for t in bin/ip sbin/tc usr/bin/tcpdump; do n=$(basename $t)
    # tcpdump drops to user 'tcpdump', which the image lacks: -Z root keeps it root
    z=""; [ $n = tcpdump ] && z="-Z root"
    if ! command -v $n >/dev/null; then
      printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s %s "$@"\n' $L $G/deb/$t "$z" > $G/bin/$n
      chmod +x $G/bin/$n; echo "wrapped $n"
    fi
  done
  export PATH=$G/bin:$PATH
  ip netns add gwprobe && ip -n gwprobe link add br0 type bridge \
    && ip -n gwprobe link add v0 type veth peer name v1 \
    && tc -n gwprobe qdisc add dev v0 root handle 1: htb default 10 && echo "netns/htb ok"
  ip netns del gwprobe
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $G/site \
    .dev/whl/*.whl && echo "wheels ok"
fi
