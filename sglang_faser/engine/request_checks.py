"""Refuse bad requests at the door: a 400 naming the field, never an engine error.

SGLang's tokenizer manager builds and checks every request's ``SamplingParams`` in the HTTP process
(``sampling_params.verify``, tokenizer_manager.py:1567); a ``ValueError`` raised there becomes an HTTP 400 for the
native and the OpenAI endpoints alike. The AROUND hook below adds the check of ``custom_params["faser"]``
(``sglang_faser/spec/request_params.py``) to that method.

SGLang does not check that a request's ``input_ids`` lie in the model's vocabulary: an id past it reached the
target's embedding in the scheduler and ended the server (an ``IndexError`` there stops every process, and every
request in flight is lost). ``around_validate_one_request`` checks them where SGLang checks the prompt's length.
"""

from __future__ import annotations

from sglang_faser.engine import touchpoints
from sglang_faser.spec.config import ConfigError
from sglang_faser.spec.request_params import parse


def around_verify(original, sampling_params, *args, **kwargs):
    result = original(sampling_params, *args, **kwargs)
    try:
        parse(getattr(sampling_params, "custom_params", None))
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    return result


def around_validate_one_request(original, manager, obj, input_ids, *args, **kwargs):
    vocab = touchpoints.text_vocab_size(manager, obj)
    if vocab is not None and input_ids:
        check_token_ids(input_ids, vocab)
    return original(manager, obj, input_ids, *args, **kwargs)


def check_token_ids(input_ids, vocab_size: int) -> None:
    """ValueError (an HTTP 400) naming an id outside [0, vocab_size): the lowest if negative, else the highest."""
    low, high = min(input_ids), max(input_ids)
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(f"input_ids: token id {bad} is outside the model's vocabulary; valid range is "
                         f"[0, {vocab_size})")
