"""Preset cluster descriptions (YAML files) read by ``twin.topology.load_cluster``."""
