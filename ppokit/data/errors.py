"""The one error type of ppokit.data."""


class DataError(ValueError):
    """Bad dataset input; the message names the file, line and field, as a sentence a user can act on."""
