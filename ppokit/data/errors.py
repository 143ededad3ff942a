"""The one error type of ppokit.data."""

from ppokit.errors import PpokitError


class DataError(PpokitError, ValueError):
    """Bad dataset input; the message names the file, line and field, as a sentence a user can act on."""
