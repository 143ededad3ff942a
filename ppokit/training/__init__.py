"""The training room: one step's phases as functions from values to values, on top of the rooms below.

Owns: the step's two sides (`sides`: the Producer and the Learner, their weight hand-off), the one ordered list
of phases (`phases.PHASES`: rollout → score → dynamic sampling | log-probs → advantages → update, each returning a
new `RolloutBatch`, walked by `phases.walk`), the run loop (`loop.Trainer`), the one update loop (`update.minibatch_update` with the per-step `LossConfig`), the
actor/critic/PTX losses as compositions of algos registry entries (`actor`, `critic`, `ptx`), forward
passes over batches (`forward`), advantages per the algorithm table (`advantage`), the step's metrics
over ranks (`metrics`), building the two sides (`build`, `engine_setup`) and evaluation. It owns no formula
(those are `ppokit.algos`'s) and no DeepSpeed detail (`ppokit.engine`'s); the order of the phases is
`phases.PHASES`'s alone.
May import: algorithms, algos, args, engine, data, tasks, models, rollout, rewards, tracking, widgets.
Never `ppokit.session`, `ppokit.checkpoint` or `ppokit.export`.
"""
