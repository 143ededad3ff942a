import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: on a shared 2-core machine the tiny models run several times faster."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
