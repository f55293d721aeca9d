"""Training: typed configs, data preparation, train_step / apply_update, data parallelism,
validation, checkpoints, and the trainer that orders them."""

from odet.training.checkpoint import (
    Checkpoint,
    TrainerState,
    latest_checkpoint,
    load_checkpoint,
    resolve_model_dir,
    save_checkpoint,
    verify_checkpoint,
)
from odet.training.config import (
    DataConfig,
    LoopConfig,
    OptimConfig,
    TrainConfig,
    apply_overrides,
    load_train_config,
)
from odet.training.lm import LMResult, LMTrainer, train_lm
from odet.training.lm_config import LMTrainConfig, load_any_config
from odet.training.loss import label_smoothed_loss
from odet.training.schedule import (
    SCHEDULES,
    inverse_sqrt_factor,
    inverse_sqrt_schedule,
    make_schedule,
)
from odet.training.trainer import Trainer, TrainingInterruptedError, TrainResult, train

__all__ = [
    "SCHEDULES",
    "Checkpoint",
    "DataConfig",
    "LMResult",
    "LMTrainConfig",
    "LMTrainer",
    "LoopConfig",
    "OptimConfig",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "TrainerState",
    "TrainingInterruptedError",
    "apply_overrides",
    "inverse_sqrt_factor",
    "inverse_sqrt_schedule",
    "label_smoothed_loss",
    "latest_checkpoint",
    "load_any_config",
    "load_checkpoint",
    "load_train_config",
    "make_schedule",
    "resolve_model_dir",
    "save_checkpoint",
    "train",
    "train_lm",
    "verify_checkpoint",
]
