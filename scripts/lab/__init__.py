"""gradwire's lab: real TensorFlow PS clusters in network namespaces (see docs/lab.md).

Run ``python scripts/lab --help`` from the repo root (as root). Modules: ``netns`` (namespaces,
veths, bridge, tc), ``models`` (graph-mode model builders), ``node`` (one PS/worker process),
``cluster`` (orchestration, throughput, CPU share), ``cli`` (arguments, summary).
"""
