"""Offline sources: readers that turn finished artifacts (logs, checkpoints) into events.

Each family lives in its own subpackage with a ``cli`` module. Sources produce the same events
as the live hooks (``traindoc.events``); detectors never see a file format.
"""
