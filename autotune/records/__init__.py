"""The record layer: every record autotune stores or emits is turned into JSON, and read back, here.

:func:`encode` writes a frozen dataclass record as the JSON value it is stored or emitted as; :func:`decode` reads
one back into its type (pydantic v2 validates the fields, so nested records, tuples and enums need no code). A
record whose stored shape differs from its fields says so once, declaratively (:func:`record`: fields left out at
their default, figures emitted beside the fields), and a shape written by older autotune is read by the readers
registered for its type (:func:`reader`), pyperf style. It imports nothing else of autotune.
"""

from autotune.records._codec import RecordError, decode, decoder, encode, reader, record

__all__ = ["RecordError", "decode", "decoder", "encode", "reader", "record"]
