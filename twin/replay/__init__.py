"""Whole-iteration replay of a trace on a cluster: iteration time, exposed communication, per-task times."""

from twin.replay.comms import Communicators, ReplayError, rank_gpus, task_of
from twin.replay.result import RankTimes, ReplayResult, TaskTimes
from twin.replay.simulation import plan_configs, replay

__all__ = ["Communicators", "RankTimes", "ReplayError", "ReplayResult", "TaskTimes", "plan_configs", "rank_gpus",
           "replay", "task_of"]
