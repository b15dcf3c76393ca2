"""Contracts shared by every stage, one concern a module, highest first (pyproject.toml's inner-order contract):

- models.py: the models shipped in the package and the names that mean them, a local path told from a hub id, a
  model dir's config.json checked, Hugging Face models loaded with each way a dir can be broken a ConfigError, the
  torch device;
- metadata.py: `arabert_pipeline.json`, the metadata stored beside each artifact, and a corpus file's sidecar;
- writes.py: atomic writes of files and directories, a failed write named by its output, written files' modes;
- reads.py: bounded, checked reads of input files: JSON and JSON lines, compressed corpora, torch checkpoints
  without unpickling (the bounded reader and the digests themselves are weights/files.py's, a layer below);
- paths.py: the data root and paths as recorded in artifacts that leave this machine.

Every tokenizer and model directory carries `arabert_pipeline.json` recording the preprocessing it was trained
with; downstream stages read it from there instead of guessing it from a model name.

Outputs (outputs.py): a verb never deletes or overwrites what it did not create. `claim_output_dir` /
`claim_output_file` refuse an output path that is or contains an input, a directory holding anything the verb does not
write, and an earlier output of the verb unless `--overwrite` (or `--resume`) says what to do with it; `OutputLock`
keeps a second run off an output while the first writes it.
"""
