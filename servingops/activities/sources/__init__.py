"""Model sources: resolve a Hugging Face or Ollama URL, fetch its files into the worker's spool.

`types` holds the activity inputs and outputs (their errors are `api_models.errors.ErrorType` members,
which the workflow writes as condition reasons), `huggingface` and `ollama` speak to the providers, `spool`
is the resumable streaming writer both share, and `activities` wraps them as the Temporal activities
`source.resolve`, `source.fetch_file` and `source.clean_spool`.

Which files of a Hugging Face repository are the model (`huggingface.select_files`):

- never: dot files and folders (.gitattributes, .gitignore, .github/ ...);
- Diffusers (model_index.json at the root): every file, except weights in other formats (pickles .bin .pt
  .pth .ckpt .pkl, and .onnx .onnx_data .h5 .msgpack .tflite .ot .npz .mlmodel .keras .pb .nemo, .gguf) and
  their indexes, export folders (onnx/ openvino/ coreml/ tflite/ tensorrt/ flax/), training logs (tfevents),
  single-file checkpoints at the root (the pipeline's weights are in its component folders), and variant
  weights (`<stem>.fp16.safetensors`, `<stem>.safetensors.index.fp16.json`, ...) in a folder that also has
  the canonical `<stem>.safetensors` (or its index or shards);
- Safetensors (*.safetensors or *.safetensors.index.json at the root): the same rules, plus original/
  (Meta's consolidated checkpoint) and consolidated*.safetensors at the root next to model*.safetensors
  (Mistral's native copy) are skipped; configs, tokenizers, templates, custom code (*.py) and docs stay;
- GGUF (no root safetensors, some .gguf; or a blob/<rev>/<file>.gguf URL naming one): one model, by the rule
  Q4_K_M, else Q8_0, else the smallest (by total size), among the root's GGUF models if it has any, else
  all; split files (-0000N-of-0000M) of the chosen model together; one multimodal projector (a .gguf with
  "mmproj" in its name, preferring the chosen model's folder, then F16, BF16, F32, Q8_0, else the smallest);
  and, from the root, only README*, LICENSE*/LICENCE*, NOTICE*, COPYING*, USE_POLICY*, params*, config.json,
  generation_config.json, chat_template.json and *.jinja. The quantization is read from the file name (the
  last token such as Q4_K_M, IQ4_XS, Q8_0, F16, BF16);
- anything else fails at resolve with InvalidModel (UnsupportedFormat when only pickles or other
  frameworks' weights are there, UnknownFormat otherwise), before anything is downloaded.

What an Ollama manifest becomes is described in `ollama`.
"""

from servingops.activities.sources.activities import SourceActivities, source_type
from servingops.activities.sources.tokens import TOKEN_KEYS
from servingops.activities.sources.types import (
    CleanSpoolInput,
    FetchedFile,
    FetchInput,
    ResolveInput,
    SourceFile,
    SourceListing,
)

__all__ = [
    "TOKEN_KEYS",
    "CleanSpoolInput",
    "FetchInput",
    "FetchedFile",
    "ResolveInput",
    "SourceActivities",
    "SourceFile",
    "SourceListing",
    "source_type",
]
