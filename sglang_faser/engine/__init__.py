"""The thin SGLang layer: the only package in sglang_faser that imports SGLang (pinned ==0.5.23).

Every SGLang import, attribute access and patch is in ``touchpoints.py`` (tests/engine/test_adapter_boundary.py
checks the other modules); an SGLang upgrade revisits that file first.
"""
