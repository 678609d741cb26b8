"""Every knob of the test server, and the command line that carries it to a child process."""

from __future__ import annotations

from dataclasses import dataclass

from tests.support.sse_server.faults import FaultRule


@dataclass(frozen=True)
class ServerConfig:
    """Every knob of the test server; the command-line flags map one to one."""

    host: str = "127.0.0.1"
    port: int = 0
    first_token_ms: float = 0.0
    chunk_gap_ms: float = 0.0
    tokens_per_chunk: int = 1
    output_len_override: int | None = None
    eos_at: int | None = None
    faults: tuple[FaultRule, ...] = ()
    seed: int = 0
    api_key: str | None = None
    keep_alive_timeout_s: float = 5.0
    model_path: str = "fairbench/test-model"
    record_chunk_times: bool = True
    send_times_file: str | None = None
    cpu: int | None = None
    reuse_port: bool = False
    """Bind with SO_REUSEPORT: several server processes on one port, the kernel spreading connections
    over them (one port's traffic served by several cores)."""

    def __post_init__(self) -> None:
        if self.first_token_ms < 0 or self.chunk_gap_ms < 0:
            raise ValueError("first_token_ms and chunk_gap_ms must be >= 0")
        if self.tokens_per_chunk < 1:
            raise ValueError("tokens_per_chunk must be >= 1")
        if self.output_len_override is not None and self.output_len_override < 0:
            raise ValueError("output_len_override must be >= 0")
        if self.eos_at is not None and self.eos_at < 1:
            raise ValueError("eos_at must be >= 1")

    def to_cli_args(self) -> list[str]:
        """Command-line arguments that ``parse_args`` turns back into this config."""
        args = [
            f"--host={self.host}",
            f"--port={self.port}",
            f"--first-token-ms={self.first_token_ms!r}",
            f"--chunk-gap-ms={self.chunk_gap_ms!r}",
            f"--tokens-per-chunk={self.tokens_per_chunk}",
            f"--seed={self.seed}",
            f"--keep-alive-timeout={self.keep_alive_timeout_s!r}",
            f"--model-path={self.model_path}",
        ]
        if self.output_len_override is not None:
            args.append(f"--output-len-override={self.output_len_override}")
        if self.eos_at is not None:
            args.append(f"--eos-at={self.eos_at}")
        args += [f"--fault={rule.to_spec()}" for rule in self.faults]
        if self.api_key is not None:
            args.append(f"--api-key={self.api_key}")
        if not self.record_chunk_times:
            args.append("--no-chunk-times")
        if self.send_times_file is not None:
            args.append(f"--send-times-file={self.send_times_file}")
        if self.cpu is not None:
            args.append(f"--cpu={self.cpu}")
        if self.reuse_port:
            args.append("--reuse-port")
        return args
