"""The GGUF conversion says itself once (a timed stage line), not as transformers' per-tensor bar, which in a log
file (stderr not a terminal) becomes one line of a thousand characters."""

from ppokit.models import loading


def test_the_gguf_tensor_bar_is_off_during_the_conversion_and_back_after():
    gguf_utils = __import__("transformers.modeling_gguf_pytorch_utils", fromlist=["tqdm"])
    bar = gguf_utils.tqdm
    tensors = [object(), object()]
    with loading._no_gguf_tensor_bar():
        assert gguf_utils.tqdm(tensors, desc="Converting and de-quantizing GGUF tensors...") is tensors
    assert gguf_utils.tqdm is bar
