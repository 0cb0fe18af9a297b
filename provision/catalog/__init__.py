"""Facts about what Google sells: accelerator types (cores, chips, hosts, range sizes) and list prices."""
