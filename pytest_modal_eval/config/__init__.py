"""Configuration: the benchmark YAML schema, command-line options and ini keys, overrides, and
the loader that turns a YAML file into a validated benchmark."""
