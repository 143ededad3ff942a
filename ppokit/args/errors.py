"""The one exception type of ``ppokit.args``."""

from ppokit.errors import PpokitError


class ConfigError(PpokitError):
    """A mistake in the user's configuration; the message is a sentence naming the file and key."""
