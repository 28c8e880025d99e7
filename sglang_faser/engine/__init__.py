"""The thin SGLang layer: the only package in sglang_faser that imports SGLang (pinned ==0.5.23).

Every SGLang symbol FASER touches is named in ``touchpoints.py``; an SGLang upgrade revisits that file first.
"""
