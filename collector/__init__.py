"""gradwire.collector: the TF session hook, packet capture and `gradwire collect`."""
