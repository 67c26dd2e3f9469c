"""Every ``jingpai`` sub-command: the top layer (nothing in jingpai imports it).

One module per command (``jingpai/commands/<name>.py``), registered by name in :mod:`jingpai.cli`.
Options are generated from the component's settings dataclass (:mod:`jingpai.commands.options`), and
errors are caught once (:mod:`jingpai.commands.base`).
"""
