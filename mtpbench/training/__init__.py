"""Training the tiny Gemma4 pair mtpbench ships (its files: mtpbench/fixtures/tiny_gemma4_mtp, where the configs
point): `python -m mtpbench.training.train --out DIR` rebuilds it (docs/tiny-pair.md). It needs the `train` extra
(torch, transformers); nothing else in mtpbench imports it.

- corpus.py: Training corpus for the tiny pair: random byte crops of this interpreter's standard-library `.py` files
- deepseek.py: Train the tiny DeepSeek-V3 target and its one MTP layer (vLLM's `deepseek_mtp`), the way vLLM runs
  them: `python -m mtpbench.training.deepseek --out DIR` rebuilds mtpbench/fixtures/tiny_deepseek_mtp
- drafting.py: vLLM's Gemma4 MTP draft semantics, offline
- eagle1.py, eagle3.py: the EAGLE-1 and EAGLE-3 heads on the tiny Llama target (which head, its config.json):
  `python -m mtpbench.training.eagle1 --target mtpbench/fixtures/tiny_llama/target --out DIR` (DIR/eagle/), and
  `... eagle3 ...` (DIR/eagle3/)
- export.py: Writing a trained pair: bf16 safetensors, config and tokenizer for target/ and assistant/, and the
  provenance.json that records how they were made (command, settings, corpus, loss curves, held-out acceptance,
  machine, package versions, sizes: `run_facts`, shared by every trainer), carrying an earlier run's record of a
  reused target
- llama.py: The tiny Llama pair for the `draft_model` method (and the target the EAGLE heads are trained on):
  shapes, settings and the two phases (the target with the Gemma4 target's loop, the draft model distilled on the
  target's greedy rollouts)
- heads.py: Training an EAGLE head on a frozen tiny Llama target, shared by eagle1.py and eagle3.py: the rollouts,
  the chained training-time test, the held-out check, the files and provenance, the command line
- models.py: Architectures of the tiny Gemma4 target and its gemma4_assistant MTP drafter (configs only, no weights)
- phases.py: The two training phases and the run that chains them
- recipe.py: The training recipe every trainer shares: the settings bases (`RecipeSettings`, `PairSettings`),
  the loss-curve log, the one optimisation loop of every phase (`run_phase`), torch thread control, <bos> +
  corpus-crop batches, and building the untrained Gemma4 target and drafter from their shapes
- tokenizer.py: Byte-level tokenizer for the tiny Gemma4 pair
- train.py: Train the tiny Gemma4 target and distil its gemma4_assistant MTP drafter, the way vLLM will run them
- train_llama.py: Train the tiny Llama target and distil its draft model (vLLM's `draft_model` method):
  `python -m mtpbench.training.train_llama --out DIR` (mtpbench/fixtures/tiny_llama)
"""
