"""Whole-iteration replay of a trace on a cluster: iteration time, exposed communication, per-task times."""

from twin.replay.result import RankTimes, ReplayResult, TaskTimes
from twin.replay.simulation import ReplayError, plan_configs, replay

__all__ = ["RankTimes", "ReplayError", "ReplayResult", "TaskTimes", "plan_configs", "replay"]
