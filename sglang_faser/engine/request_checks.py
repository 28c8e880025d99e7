"""Refuse bad per-request FASER controls at the door: a 400 naming the field, never an engine error.

SGLang's tokenizer manager builds and checks every request's ``SamplingParams`` in the HTTP process
(``sampling_params.verify``, tokenizer_manager.py:1567); a ``ValueError`` raised there becomes an HTTP 400 for the
native and the OpenAI endpoints alike. The AROUND hook below adds the check of ``custom_params["faser"]``
(``sglang_faser/spec/request_params.py``) to that method.
"""

from __future__ import annotations

from sglang_faser.spec.config import ConfigError
from sglang_faser.spec.request_params import parse


def around_verify(original, sampling_params, *args, **kwargs):
    result = original(sampling_params, *args, **kwargs)
    try:
        parse(getattr(sampling_params, "custom_params", None))
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    return result
