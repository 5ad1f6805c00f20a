"""Training loops: full-graph (one process or many) with checkpoints and early stopping."""

from sparsegnn.train.checkpoint import load_checkpoint, save_checkpoint, seed_everything
from sparsegnn.train.fullgraph import (
    EpochStats,
    LocalTask,
    Task,
    TrainConfig,
    TrainResult,
    build_model,
    fit,
    local_task,
    train_single,
)
from sparsegnn.train.model_grid import Grid, ModelRun, train_model

__all__ = [
    "EpochStats",
    "Grid",
    "LocalTask",
    "ModelRun",
    "Task",
    "TrainConfig",
    "TrainResult",
    "build_model",
    "fit",
    "load_checkpoint",
    "local_task",
    "save_checkpoint",
    "seed_everything",
    "train_model",
    "train_single",
]
