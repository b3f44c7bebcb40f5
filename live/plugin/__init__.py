"""ccltwin's NCCL tuner + profiler plugin: the C library, its build, and its control from Python."""

from live.plugin.binding import CommInfo, Decision, Event, Installed, Plugin, RuleTableFull, install_env

__all__ = ["CommInfo", "Decision", "Event", "Installed", "Plugin", "RuleTableFull", "install_env"]
