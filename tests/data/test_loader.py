import pytest

from ppokit.data import DataError, PromptLoader

RECORDS = [{"prompt": f"p{i}", "i": i} for i in range(10)]


def ids(batch):
    return [r["i"] for r in batch]


def test_each_epoch_visits_every_record_once_in_a_seeded_order():
    loader = PromptLoader(RECORDS, batch_size=5, seed=3)
    assert len(loader) == 2 and loader.epoch == 0
    first = ids(loader.next_batch()) + ids(loader.next_batch())
    assert sorted(first) == list(range(10)) and loader.epoch == 1
    second = ids(loader.next_batch()) + ids(loader.next_batch())
    assert sorted(second) == list(range(10)) and second != first
    again = PromptLoader(RECORDS, batch_size=5, seed=3)
    assert ids(again.next_batch()) + ids(again.next_batch()) == first


def test_unshuffled_order_and_wrap_around_without_drop_last():
    loader = PromptLoader(RECORDS, batch_size=4, seed=0, shuffle=False)
    assert len(loader) == 3
    assert [ids(loader.next_batch()) for _ in range(3)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]
    assert loader.epoch == 1 and ids(loader.next_batch()) == [2, 3, 4, 5]


def test_drop_last_skips_the_remainder():
    loader = PromptLoader(RECORDS, batch_size=4, seed=0, shuffle=False, drop_last=True)
    assert len(loader) == 2
    assert [ids(loader.next_batch()) for _ in range(3)] == [[0, 1, 2, 3], [4, 5, 6, 7], [0, 1, 2, 3]]
    assert loader.epoch == 1


def test_dataset_smaller_than_a_batch_wraps():
    loader = PromptLoader(RECORDS[:3], batch_size=7, seed=0, shuffle=False)
    assert ids(loader.next_batch()) == [0, 1, 2, 0, 1, 2, 0] and loader.epoch == 2
    with pytest.raises(DataError, match="drop_last=True with batch size 7 but only 3 records"):
        PromptLoader(RECORDS[:3], batch_size=7, seed=0, drop_last=True)


@pytest.mark.parametrize(
    ("k", "m", "batch_size", "drop_last"),
    [(0, 5, 3, False), (3, 7, 3, False), (4, 6, 4, True), (7, 9, 6, False)],
)
def test_resume_draws_exactly_what_the_uninterrupted_run_draws(k, m, batch_size, drop_last):
    straight = PromptLoader(RECORDS, batch_size, seed=11, drop_last=drop_last)
    expected = [ids(straight.next_batch()) for _ in range(k + m)]
    first = PromptLoader(RECORDS, batch_size, seed=11, drop_last=drop_last)
    assert [ids(first.next_batch()) for _ in range(k)] == expected[:k]
    state = first.state_dict()
    resumed = PromptLoader(list(RECORDS), batch_size, seed=11, drop_last=drop_last)
    resumed.load_state_dict(state)
    assert resumed.epoch == first.epoch and resumed.batches_drawn == k
    assert [ids(resumed.next_batch()) for _ in range(m)] == expected[k:]


def test_resume_refuses_a_different_dataset_or_seed():
    state = PromptLoader(RECORDS, 4, seed=1).state_dict()
    with pytest.raises(DataError, match="the checkpoint's dataset had 10 records but this one has 9"):
        PromptLoader(RECORDS[:9], 4, seed=1).load_state_dict(state)
    with pytest.raises(DataError, match="the checkpoint has seed=1 but this run has seed=2"):
        PromptLoader(RECORDS, 4, seed=2).load_state_dict(state)
    with pytest.raises(DataError, match="lacks epoch, position, num_records"):
        PromptLoader(RECORDS, 4, seed=1).load_state_dict({})


def test_bad_arguments():
    with pytest.raises(DataError, match="the prompt loader got no records"):
        PromptLoader([], 4, seed=0)
    with pytest.raises(DataError, match="batch size must be a positive integer, got 0"):
        PromptLoader(RECORDS, 0, seed=0)
