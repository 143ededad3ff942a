"""One spec per algorithm (issue 36): the table's rows, the estimator and policy-loss registries and the argument
choices agree, and everything that used to list algorithm names reads the table."""

import typing

from ppokit.algorithms import ALGORITHMS, NORM_OFF_ALGORITHMS, POLICY_LOSS_TABLE, VERL_ESTIMATORS
from ppokit.algos import ADVANTAGE_ESTIMATORS, POLICY_LOSSES
from ppokit.args import Arguments, load_arguments
from ppokit.args.rules import ALGORITHM_PRESETS


def test_every_row_names_a_registered_estimator_and_every_policy_loss_has_a_row_and_a_function():
    assert {a.estimator for a in ALGORITHMS.values()} <= set(ADVANTAGE_ESTIMATORS)
    assert list(POLICY_LOSSES) == list(POLICY_LOSS_TABLE)


def test_argument_choices_come_from_the_tables():
    fields = Arguments.model_fields
    assert typing.get_args(fields["rl_algorithm"].annotation) == tuple(ALGORITHMS)
    assert typing.get_args(fields["policy_loss"].annotation) == tuple(POLICY_LOSS_TABLE)


def test_presets_normalisation_labels_and_verl_names_are_the_rows():
    assert ALGORITHM_PRESETS["dapo"]["dynamic_sampling"] is True and "grpo" not in ALGORITHM_PRESETS
    assert NORM_OFF_ALGORITHMS == {"grpo", "drgrpo", "dapo", "rloo"}
    assert VERL_ESTIMATORS["gae"] == "ppo" and "vapo" not in VERL_ESTIMATORS.values()
    args = load_arguments(None, overrides={"rl_algorithm": "drgrpo", "rollout_n": 2, "global_batch_size": 2,
                                               "global_mini_batch_size": 2})
    assert (args.norm_adv_by_std_in_grpo, args.loss_agg_mode, args.normalize_advantage) == (
        False, "seq-mean-token-sum-norm", False)
    from ppokit.tracking.report_args import _algorithm

    assert _algorithm({"rl_algorithm": "ppo"}) == "PPO (actor + critic)" and _algorithm({"rl_algorithm": "x"}) == "x"
