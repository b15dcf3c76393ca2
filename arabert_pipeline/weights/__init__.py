"""A model's weights as the package stores and reads them, below every stage:

- rows.py: the compact storage (issue 53): int8 rows with their scales, exact rows, 4-bit rows; the quantizers, and
  `compact` / `compact_graph`, which write it;
- header.py: a safetensors file's header, read and checked before anything is built from the file;
- loading.py: `from_pretrained` (every loader of the package goes through it), the fp32 arrays of a weights file,
  `write_plain` (a plain transformers copy);
- tables.py: a static reader's word table (float16, int8 rows, a 4-bit tail);
- shared_tokenizer.py: a model dir's tokenizer.json, its own or the sibling model's it shares;
- files.py: bounded reads and digests of a model dir's files, which every layer above reads files with.

`arabert-pipeline weights MODEL_DIR --int8-rows | --plain OUT` is the verb on top (finetuning/weightscli.py).
"""
