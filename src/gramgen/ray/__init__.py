"""Ray Data at the edge: distributed extraction (``gramgen extract --ray`` and
:func:`extract_dataset`, which maps a ``ray.data.Dataset`` of documents to records with a pool
of Ray actors, one model each; with ``engine="vllm"``, through Ray Data LLM's vLLM engines,
:mod:`gramgen.ray.llm`, imported only then).

Needs the ``ray`` extra (``pip install gramgen[ray]``). This package imports the layers above
it; nothing in them imports it.
"""

from .extract import OUTPUT_COLUMNS, extract_dataset, record_of

__all__ = ["OUTPUT_COLUMNS", "extract_dataset", "record_of"]
