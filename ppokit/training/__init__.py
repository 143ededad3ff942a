"""The training room: one step's phases as functions from values to values, on top of the rooms below.

Owns: the step's phases (`phases`: rollout → score → advantages → update, each returning a new
`RolloutBatch`), the one update loop (`update.minibatch_update` with the per-step `LossConfig`), the
actor/critic/PTX losses as compositions of algos registry entries (`actor`, `critic`, `ptx`), forward
passes over batches (`forward`), advantages per the algorithm table (`advantage`), the step's metrics
over ranks (`metrics`), building a Session's state (`build`, `engine_setup`), evaluation and the
train loop. It owns no formula (those are `ppokit.algos`'s) and no DeepSpeed detail (`ppokit.engine`'s);
the order of the phases is decided in `Session.step` alone.
May import: algorithms, algos, args, engine, data, tasks, models, rollout, rewards, tracking, widgets.
Never `ppokit.session`, `ppokit.checkpoint` or `ppokit.export`.
"""
