"""Reading what the toolkit logged: ``RKNN`` reports failures as error lines (and -1), as
RKNN-Toolkit2 does, so tests read them back from pytest's ``caplog``."""

import logging


def errors(caplog):
    """The messages of the error records ``caplog`` captured, oldest first."""
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
