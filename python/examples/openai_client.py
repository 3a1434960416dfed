#!/usr/bin/env python3
"""openai_client.py — `lazyinfer serve` through the official `openai` client, with documents.

The server's `documents` extension field (docs/SERVER.md) goes in `extra_body`; each document is
encoded once and reused by every request that names it, which the second request's
usage.prompt_tokens_details.cached_tokens shows. Needs `pip install openai` (only this example
does). Start a server first, from the repository root:

    ./lazyinfer serve --port 8080 &
    python python/examples/openai_client.py --base-url http://127.0.0.1:8080/v1
"""
import argparse
import sys

from openai import OpenAI


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--api-key", default="sk-local", help="any key when the server has none")
    args = ap.parse_args()

    client = OpenAI(base_url=args.base_url, api_key=args.api_key)
    model = client.models.list().data[0].id
    documents = [{"id": "memo", "text": "The secret code is 4821."}, "Bob likes cheese."]
    for question in ["What is the secret code? Answer with the number only.",
                     "Who likes cheese? Answer with the name only."]:
        r = client.chat.completions.create(
            model=model, temperature=0, max_tokens=16,
            messages=[{"role": "user", "content": question}],
            extra_body={"documents": documents})
        details = r.usage.prompt_tokens_details
        cached = details.cached_tokens if details else 0
        print(f"{question}\n  -> {r.choices[0].message.content!r} "
              f"(prompt {r.usage.prompt_tokens} tokens, {cached} cached)")

    print("streaming:", end=" ", flush=True)
    for chunk in client.chat.completions.create(
            model=model, max_tokens=32, temperature=0, stream=True,
            messages=[{"role": "user", "content": "What is the code?"}],
            extra_body={"documents": documents}):
        if chunk.choices and chunk.choices[0].delta.content:
            print(chunk.choices[0].delta.content, end="", flush=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
