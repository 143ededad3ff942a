"""The one exception type of ``ppokit.args``."""


class ConfigError(Exception):
    """A mistake in the user's configuration; the message is a sentence naming the file and key."""
