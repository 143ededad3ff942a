"""Launch dialects other than PaddleNLP's: each translates another trainer's configuration into ppokit's
arguments (and back). They sit above `ppokit.args` (they build `Arguments`); `args` imports none of them and
reaches one by name only where its own front doors meet it (`ppokit.args.dialect`).

May import: `ppokit.args` and the algorithm table `ppokit.algorithms`; nothing heavy (no torch).
"""
