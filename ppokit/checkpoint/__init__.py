"""Checkpoints: save, resume, guard, lock — one package behind a state protocol.

  files    the folder layout, finding complete checkpoints, atomic publish, pruning
  state    the `Stateful` protocol (state_dict / load_state_dict), the run's parts, `register`, the manifest
  save     `save_checkpoint`: the models through DeepSpeed, every part through the protocol
  resume   `resume_into`: checks, the models, then every part (the RNGs last)
  guard    damaged files, optimizer settings changed since the checkpoint, abandoned newer checkpoints
  safety   finite weights, a full disk, the data's fingerprint, a changed run plan
  lock     the output folder's run lock and the model-folder check
  claim    who may write a run's records in output_dir (nothing erased unasked)
  run      `Session.train`'s frame: lock, prepare, SIGTERM, the final save
  signals  the one signal rule: a first SIGTERM checkpoints between steps, a second one or Ctrl-C stops at once
"""

from ppokit.checkpoint.claim import EarlierRunError, claim_output_dir
from ppokit.checkpoint.files import (
    STATE_FILE,
    CheckpointError,
    complete_checkpoints,
    find_checkpoint,
    is_auto,
)
from ppokit.checkpoint.guard import DamagedCheckpointError
from ppokit.checkpoint.lock import LOCK_FILE, OutputDirError
from ppokit.checkpoint.resume import resume_into
from ppokit.checkpoint.safety import DiskFullError, NonFiniteWeightsError
from ppokit.checkpoint.save import checkpoint_bytes, save_checkpoint
from ppokit.checkpoint.state import MANIFEST_FILE, Stateful, register

__all__ = [
    "LOCK_FILE", "MANIFEST_FILE", "STATE_FILE", "CheckpointError", "DamagedCheckpointError", "DiskFullError",
    "EarlierRunError", "NonFiniteWeightsError", "OutputDirError", "Stateful", "checkpoint_bytes", "claim_output_dir",
    "complete_checkpoints", "find_checkpoint", "is_auto", "register", "resume_into", "save_checkpoint",
]
