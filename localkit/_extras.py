"""How to install an optional extra, worded once (localkit is installed from its clone: the
extras are named as pip takes them there, quoted for the shell)."""


def install_extra(extra):
    """``pip install ".[extra]"`` (from a clone of localkit)."""
    return f'pip install ".[{extra}]" (from a clone of localkit)'
