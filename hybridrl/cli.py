"""`hybridrl` command line: train (RL), sft, rm, plan, data, model, export, algos, plot, compare, eval, sweep, serve,
view, doctor, check.

Config commands take `--config FILE.yaml` and verl-style `key=value` overrides; `--help`
lists every key with its default and meaning. A user error prints one line, exit code 2.
"""

from __future__ import annotations

import argparse
import sys

from hybridrl import progress
from hybridrl.errors import HybridRLError
from hybridrl.interrupt import (
    EXIT_CODE,
    Interrupted,
    handling_signals,
    interrupted_message,
    kill_descendants,
    stopping,
)


def _keys_help(cls) -> str:
    from hybridrl.config.reference import keys_help  # the docs' config reference renders the same rows
    from hybridrl.config.schema import RLConfig

    lines = [keys_help(cls)]
    if cls is RLConfig:
        lines.append("verl keys without a field here (e.g. actor_rollout_ref.rollout.mode, *.megatron.*) are accepted "
                     "where their value trains as hybridrl trains, and otherwise refused saying why and what to use "
                     "instead: hybridrl/vocab/verl_key_table.py lists them. Hydra's +key=value and ++key=value work.")
    return "\n".join(lines)


def _add_config_command(sub, name: str, help_text: str, cls):
    p = sub.add_parser(name, help=help_text, description=help_text, epilog=_keys_help(cls),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="YAML file of config keys (overrides on the command line win)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted config overrides, verl style")
    return p


def _add_eval_command(sub) -> None:
    from hybridrl.config.schema import DataConfig, MultiTurnConfig, RewardModelConfig

    d, rm, mt = DataConfig(), RewardModelConfig(), MultiTurnConfig()
    text = ("validation metrics (reward mean@n, pass@k, ...) of a model or checkpoint on prompt files, plus "
            "diversity of the n samples per prompt and, with --ref, KL to a reference model")
    ev = sub.add_parser("eval", help=text, description=text,
                        epilog="prints a table; --output writes it as JSON, --dump every generation as JSONL")
    ev.add_argument("--model", default="tiny-arith", help="HF model folder, bundled model name, run folder (newest "
                                                          "checkpoint) or global_step_<N> folder (default: %(default)s)")
    ev.add_argument("--data", nargs="+", required=True, metavar="FILE", help="parquet/jsonl files in verl's schema")
    ev.add_argument("--n", type=int, default=8, help="samples per prompt (default: %(default)s)")
    ev.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default: %(default)s)")
    ev.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default: %(default)s)")
    ev.add_argument("--top-k", type=int, default=-1, help="top-k sampling, -1: off (default: %(default)s)")
    ev.add_argument("--greedy", action="store_true", help="argmax decoding instead of sampling")
    ev.add_argument("--max-prompt-length", type=int, metavar="N",
                    help="longest prompt in tokens, after the chat template; a longer one is an error (default: the "
                         "longest prompt of --data)")
    ev.add_argument("--max-response-length", type=int, metavar="N",
                    help="most tokens generated per response (default: the model's context left after the longest "
                         "prompt, at most 1024)")
    ev.add_argument("--max-samples", type=int, default=-1, help="evaluate the first N prompts, -1: all (default: %(default)s)")
    ev.add_argument("--batch-size", type=int, default=256, help="responses per generation batch (default: %(default)s)")
    ev.add_argument("--seed", type=int, default=1, help="sampling seed (default: %(default)s)")
    ev.add_argument("--ref", help="reference model for the KL metrics (same kinds of path as --model)")
    ev.add_argument("--output", metavar="JSON", help="write settings and metrics as JSON here")
    ev.add_argument("--dump", metavar="JSONL", help="write every generation (prompt, response, score, ...) here")
    ev.add_argument("--prompt-key", default=d.prompt_key, help="column of the chat messages (default: %(default)s)")
    ev.add_argument("--reward-fn-key", default=d.reward_fn_key,
                    help="column naming each row's reward scorer (default: %(default)s)")
    ev.add_argument("--num-workers", type=int, default=rm.num_workers,
                    help="scoring processes, 0: in this process (default: %(default)s)")
    ev.add_argument("--on-error", choices=("raise", "zero"), default=rm.on_error,
                    help="a failing scorer stops the eval, or scores 0 and is counted (default: %(default)s)")
    ev.add_argument("--custom-reward-path", help="Python file with a verl-style reward function for every row")
    ev.add_argument("--custom-reward-name", default="compute_score", help="its name (default: %(default)s)")
    ev.add_argument("--tool-config", metavar="YAML",
                    help="tools YAML (as actor_rollout_ref.rollout.multi_turn.tool_config_path): multi-turn responses "
                         "that may call the tools, generated as the trainer does; adds num_turns/* and tool_call_counts/*")
    # default None, so that a limit given without --tool-config is refused rather than ignored
    ev.add_argument("--max-assistant-turns", type=int, metavar="N",
                    help=f"with --tool-config: most model turns per response (default: {mt.max_assistant_turns})")
    ev.add_argument("--max-tool-response-length", type=int, metavar="N",
                    help=f"with --tool-config: characters of a tool's answer shown to the model "
                         f"(default: {mt.max_tool_response_length})")


def _add_model_command(sub) -> None:
    model = sub.add_parser("model", help="model files: convert a GGUF file into a HuggingFace folder",
                           description="model files: convert a GGUF file into a HuggingFace folder")
    msub = model.add_subparsers(dest="model_command", required=True)
    text = ("dequantize a GGUF model (llama.cpp format) into a HuggingFace folder (safetensors, config, tokenizer "
            "with chat template) that loads offline with AutoModelForCausalLM; checked by reloading it")
    fg = msub.add_parser("from-gguf", help=text, description=text)
    fg.add_argument("gguf_file", metavar="GGUF_FILE", help="the .gguf file")
    fg.add_argument("out_dir", metavar="OUT_DIR", help="new output folder (must not exist, or be empty)")
    fg.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                    help="dtype of the saved weights (default: %(default)s)")
    fg.add_argument("--sha256", help="refuse the file unless its sha256 is this hex digest")


def build_parser() -> argparse.ArgumentParser:
    from hybridrl.config.rm import RMConfig
    from hybridrl.config.schema import RLConfig
    from hybridrl.config.sft import SFTConfig

    parser = argparse.ArgumentParser(prog="hybridrl", description="RL post-training for LLMs (GRPO, PPO, ...).")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_config_command(sub, "train", "RL training (GRPO by default) on the bundled tiny model and arithmetic data", RLConfig)
    _add_config_command(sub, "plan", "print the batch plan and a memory estimate of a train config, without training", RLConfig)
    _add_config_command(sub, "sft", "supervised fine-tuning on prompt/response rows", SFTConfig)
    rm = _add_config_command(sub, "rm", "reward-model training (Bradley-Terry) on preference pairs (prompt, chosen, "
                                        "rejected); writes a *ForSequenceClassification folder for "
                                        "reward_model.model.path", RMConfig)
    rm.add_argument("--plan", action="store_true", help="print the derived micro-batch size and the memory estimate, "
                                                        "then exit without training (as `hybridrl plan` does for train)")
    data = sub.add_parser("data", help="write datasets in verl's parquet schema",
                          description="write datasets in verl's parquet schema")
    dsub = data.add_subparsers(dest="dataset", required=True)
    ar = dsub.add_parser("arithmetic", help="synthetic arithmetic (addition by default): train.parquet and val.parquet (disjoint)",
                         description="synthetic arithmetic (addition by default): train.parquet and val.parquet (disjoint)")
    ar.add_argument("--output", default="data/arithmetic", help="output folder (default: %(default)s)")
    ar.add_argument("--train-size", type=int, default=9000, help="training problems (default: %(default)s)")
    ar.add_argument("--val-size", type=int, default=500, help="validation problems (default: %(default)s)")
    ar.add_argument("--seed", type=int, default=0, help="seed (default: %(default)s)")
    ar.add_argument("--min-operands", type=int, default=2, help="fewest numbers per problem (default: %(default)s)")
    ar.add_argument("--max-operands", type=int, default=2, help="most numbers per problem (default: %(default)s)")
    ar.add_argument("--max-value", type=int, default=99, help="largest operand (default: %(default)s)")
    ar.add_argument("--ops", default="+", help="operators to draw from: '+', '-' or '+-' (default: %(default)s)")
    for name, what, env_name in (("gsm8k", "GSM8K (openai/gsm8k): answer after '####'", "gsm8k"),
                                 ("math", "MATH / MATH-500 (HuggingFaceH4/MATH-500): answer in \\boxed{}", "math500")):
        text = f"{what}; a local jsonl/parquet file or a folder with train*/test* files -> <output>/<split>.parquet"
        d = dsub.add_parser(name, help=text, description=text)
        d.add_argument("--input", help="local file or folder, nothing is downloaded (default: "
                                       f"$HYBRIDRL_DATA_DIR/{env_name} when that variable is set)")
        d.set_defaults(env_name=env_name)
        d.add_argument("--output", default=f"data/{name}", help="output folder (default: %(default)s)")
    _add_model_command(sub)
    ex = sub.add_parser("export", help="write a checkpoint's policy as a plain HuggingFace folder, verified by logits",
                        description="write a checkpoint's policy as a plain HuggingFace folder, verified by logits")
    ex.add_argument("checkpoint", help="a global_step_<N> folder, or a run folder (its newest whole checkpoint)")
    ex.add_argument("out", help="new output folder")
    ex.add_argument("--merge-lora", action="store_true",
                    help="a LoRA run: write the base model with the adapter merged in (loads without peft); "
                         "without it the adapter folder is written (loads with peft on its base model)")
    sub.add_parser("algos", help="list advantage estimators, policy losses, KL estimators and loss reductions",
                   description="list advantage estimators, policy losses, KL estimators and loss reductions")
    run_help = "run folders (a run's trainer.default_local_dir) or metrics.jsonl files"
    text = ("plot reward, validation accuracy, KL, entropy, response length and step time of runs against step; "
            "or with --timeline a run's phase timeline")
    pl = sub.add_parser("plot", help=text, description=text)
    pl.add_argument("runs", nargs="*", metavar="RUN_DIR", help=run_help)
    pl.add_argument("--timeline", metavar="PATH", help="instead: the file trainer.profile_timeline wrote, one row "
                                                        "per process, coloured by phase")
    pl.add_argument("--sweep", metavar="SWEEP_DIR", help="instead: a sweep folder; the sweep's metric against each "
                                                         "swept key, and the metric over steps (docs/sweep.md)")
    pl.add_argument("-o", "--output", help="image to write, .png/.pdf/.svg (default: curves.png, with --timeline "
                                           "timeline.png, with --sweep sweep.png)")
    text = "table of the final and best value of each metric per run (validation accuracy, reward, KL, time, ...)"
    cmp = sub.add_parser("compare", help=text, description=text)
    cmp.add_argument("runs", nargs="+", metavar="RUN_DIR", help=run_help + ", or one sweep folder (its trials, best "
                                                                  "first, with their sampled values)")
    cmp.add_argument("--keys", help="comma-separated metrics, e.g. critic/score/mean,actor/entropy,steps (default: "
                                    "validation accuracy per source, reward, length, entropy, KL, time, steps)")
    cmp.add_argument("--json", metavar="PATH", help="also write the table as JSON to PATH")
    _add_eval_command(sub)
    text = ("hyperparameter sweep with Ray Tune: each trial an ordinary run in <output>/<trial_id>/ (docs/sweep.md); "
            "the same command resumes an interrupted sweep")
    sw = sub.add_parser("sweep", help=text, description=text)
    sw.add_argument("sweep_file", metavar="SWEEP_FILE", help="YAML: base, space, metric, mode, num_samples, search, "
                                                             "scheduler, output")
    sw.add_argument("--resume", action="store_true", help="only resume: refuse when the output folder holds no sweep")
    from hybridrl import doctor
    from hybridrl.check import cli as check_cli
    from hybridrl.serve import cli as serve_cli

    from hybridrl.view import cli as view_cli

    serve_cli.add_parser(sub)
    view_cli.add_parser(sub)
    doctor.add_parser(sub)
    check_cli.add_parser(sub)
    return parser


def cmd_train(args) -> None:
    from hybridrl.plan.resolve import load_run_plan
    from hybridrl.trainer.launch import launch

    run = load_run_plan(args.config, args.overrides)  # every config problem at once
    launch(run)  # the same path as hybridrl.train (hybridrl/api/train.py)


def cmd_plan(args) -> None:
    from hybridrl.plan.levers import offload_note, zero_advantage_note
    from hybridrl.plan.memory_fixes import check_memory
    from hybridrl.plan.resolve import load_run_plan

    run = load_run_plan(args.config, args.overrides)  # every config problem at once
    print(run.batch.describe())
    print(run.placement())
    for note in (offload_note(run.config), zero_advantage_note(run.config)):
        if note:
            print(note)
    print(check_memory(run.config, run.batch).describe())  # a config that cannot fit is refused here, with values that do


def cmd_sft(args) -> None:
    from hybridrl.config.loader import load_config
    from hybridrl.config.sft import SFTConfig
    from hybridrl.trainer.sft import run_sft

    cfg = load_config(SFTConfig, args.config, args.overrides)
    with progress.reporting():  # one for the setup and the steps
        run_sft(cfg)


def cmd_rm(args) -> None:
    from hybridrl.config.loader import load_config
    from hybridrl.config.rm import RMConfig
    from hybridrl.trainer.rm import check_max_length, run_rm

    cfg = load_config(RMConfig, args.config, args.overrides)
    if args.plan:
        from hybridrl.config.rm import validate_rm_config
        from hybridrl.plan.rm_memory import check_rm_memory, describe_rm_memory

        for note in validate_rm_config(cfg):
            print(note)
        check_max_length(cfg)
        print(describe_rm_memory(check_rm_memory(cfg)))  # a config that cannot fit is refused, with a value that does
        return
    with progress.reporting():  # one for the setup and the steps
        run_rm(cfg)


def cmd_data(args) -> None:
    from hybridrl.data.arithmetic import write_dataset
    from hybridrl.data.preprocess import convert
    from hybridrl.paths import check_output_folder

    check_output_folder(args.output, "--output")  # before reading or generating anything
    source = None if args.dataset == "arithmetic" else _data_input(args)
    with progress.reporting(), progress.phase(f"writing {args.dataset} data"):
        if args.dataset == "arithmetic":
            paths = write_dataset(args.output, args.train_size, args.val_size, args.seed, args.min_operands,
                                  args.max_operands, args.max_value, args.ops)
        else:
            paths = convert(args.dataset, source, args.output)
    for split, path in paths.items():
        print(f"wrote {path} ({split})")


def _data_input(args) -> str:
    """`--input`, else $HYBRIDRL_DATA_DIR/<name>: the raw files live wherever the user keeps them, never at a
    path this repository assumes."""
    import os
    from pathlib import Path

    if args.input:
        return args.input
    base = os.environ.get("HYBRIDRL_DATA_DIR")
    if base:
        return str(Path(base) / args.env_name)
    raise HybridRLError(f"no input: give --input DIR (a local {args.dataset} file or folder; nothing is downloaded), "
                        f"or set HYBRIDRL_DATA_DIR to a folder holding {args.env_name}/")


def cmd_algos(args) -> None:
    from hybridrl.algos.advantages import ADV_ESTIMATORS
    from hybridrl.algos.kl import KL_ESTIMATORS
    from hybridrl.algos.policy_losses import POLICY_LOSSES
    from hybridrl.algos.reduce import LOSS_AGG_MODES
    from hybridrl.algos.rollout_correction import ROLLOUT_IS

    for reg in (ADV_ESTIMATORS, POLICY_LOSSES, LOSS_AGG_MODES, KL_ESTIMATORS, ROLLOUT_IS):
        print(f"{reg.config_key} ({reg.kind}):")
        for e in reg.entries():
            print(f"  {e.name:<22} {e.doc}")


def cmd_export(args) -> None:
    from hybridrl.trainer.export import export

    note = lambda line: print(line, file=sys.stderr)  # noqa: E731  (a checkpoint too old to have checksums)
    with progress.reporting(), progress.phase("export"):  # copying, then loading both folders to compare logits
        src, diff = export(args.checkpoint, args.out, merge_lora=args.merge_lora, log=note)
    print(f"exported {src} -> {args.out}; logits match (max |difference| = {diff:g})")


def cmd_model(args) -> None:
    from hybridrl.models.gguf import convert

    with progress.reporting(), progress.phase("from-gguf"):
        c = convert(args.gguf_file, args.out_dir, dtype=args.dtype, sha256=args.sha256)
    print(f"wrote {c.out_dir}: {c.architecture}, {c.parameters / 1e6:.1f}M parameters ({args.dtype}); reloaded logits "
          f"match the GGUF model's (max |difference| = {c.max_logit_diff:g})")


def cmd_plot(args) -> None:
    from hybridrl.eval.plot import check_image_path, plot_runs
    from hybridrl.eval.plot_timeline import plot_timeline
    from hybridrl.eval.runs import load_runs

    if sum(map(bool, (args.runs, args.timeline, args.sweep))) != 1:
        raise HybridRLError("give run folders (hybridrl plot RUN_DIR ...), one timeline (hybridrl plot --timeline "
                            "PATH) or one sweep (hybridrl plot --sweep SWEEP_DIR): exactly one of them")
    from hybridrl.sweep.results import is_sweep_folder

    if sweeps := [p for p in args.runs if is_sweep_folder(p)]:
        raise HybridRLError(f"{sweeps[0]}: a sweep folder; plot it with hybridrl plot --sweep {sweeps[0]}")
    out = args.output or ("timeline.png" if args.timeline else "sweep.png" if args.sweep else "curves.png")
    check_image_path(out, "-o")  # before reading the inputs
    if args.sweep:
        from hybridrl.eval.plot_sweep import plot_sweep

        plot_sweep(args.sweep, out)
    elif args.timeline:
        plot_timeline(args.timeline, out)
    else:
        plot_runs(load_runs(args.runs), out)
    print(f"wrote {out}")


def cmd_sweep(args) -> None:
    from hybridrl.sweep.driver import run_sweep
    from hybridrl.sweep.spec import load_sweep

    run_sweep(load_sweep(args.sweep_file), must_resume=args.resume)


def cmd_compare(args) -> None:
    import json

    from hybridrl.eval.compare import compare_table, render, to_json
    from hybridrl.eval.runs import load_runs
    from hybridrl.paths import check_output_file
    from hybridrl.sweep.results import is_sweep_folder

    if args.json:
        check_output_file(args.json, "--json")  # before reading the runs
    if any(is_sweep_folder(p) for p in args.runs):
        return _compare_sweep(args)
    runs = load_runs(args.runs)
    keys = [k.strip() for k in args.keys.split(",") if k.strip()] if args.keys else None
    rows = compare_table(runs, keys)
    names = [run.name for run in runs]
    print(render(rows, names))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(to_json(rows, names), f, indent=2)
        print(f"wrote {args.json}", file=sys.stderr)  # stdout stays the table alone, for pipes


def _compare_sweep(args) -> None:
    import dataclasses
    import json

    from hybridrl.sweep.results import read_sweep, render_sweep

    if len(args.runs) != 1 or args.keys:
        raise HybridRLError("a sweep folder is compared alone and by its own metric: give just the folder, without "
                            "--keys (or give run folders to compare runs)")
    spec, rows = read_sweep(args.runs[0])
    print(render_sweep(spec, rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"metric": spec.get("metric"), "mode": spec.get("mode"),
                       "trials": [dataclasses.asdict(r) for r in rows]}, f, indent=2)
        print(f"wrote {args.json}", file=sys.stderr)


def cmd_serve(args) -> None:
    from hybridrl.serve.cli import run

    run(args)


def cmd_view(args) -> None:
    from hybridrl.view.cli import run

    run(args)


def cmd_doctor(args) -> int:
    from hybridrl import doctor

    return doctor.run(args)


def cmd_check(args) -> int:
    from hybridrl.check.cli import run

    return run(args)


def cmd_eval(args) -> None:
    from hybridrl.eval.evaluate import EvalSettings, evaluate, format_table

    result = evaluate(EvalSettings(
        data=args.data, model=args.model, n=args.n, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
        greedy=args.greedy, max_prompt_length=args.max_prompt_length, max_response_length=args.max_response_length,
        max_samples=args.max_samples, batch_size=args.batch_size, seed=args.seed, ref=args.ref,
        prompt_key=args.prompt_key, reward_fn_key=args.reward_fn_key, num_workers=args.num_workers,
        on_error=args.on_error, custom_reward_path=args.custom_reward_path,
        custom_reward_name=args.custom_reward_name, output=args.output, dump=args.dump, tool_config=args.tool_config,
        max_assistant_turns=args.max_assistant_turns, max_tool_response_length=args.max_tool_response_length),
        log=lambda line: print(line, file=sys.stderr))
    print(format_table(result))
    for path in (args.output, args.dump):
        if path:
            print(f"wrote {path}", file=sys.stderr)  # stdout stays the table alone, for pipes


COMMANDS = {"export": cmd_export, "model": cmd_model, "train": cmd_train, "plan": cmd_plan, "sft": cmd_sft, "rm": cmd_rm,
            "data": cmd_data, "algos": cmd_algos, "plot": cmd_plot, "compare": cmd_compare, "eval": cmd_eval,
            "sweep": cmd_sweep, "serve": cmd_serve,
            "view": cmd_view, "doctor": cmd_doctor,
            "check": cmd_check}


def main(argv: list[str] | None = None) -> int:
    """Run one command. A user error prints one line, exit 2; Ctrl-C or SIGTERM prints one line, exit 130
    (hybridrl/interrupt.py: training stops after its step, with a checkpoint)."""
    name = "hybridrl"
    with handling_signals():
        try:
            args = build_parser().parse_args(argv)
            name = f"hybridrl {args.command}"
            return COMMANDS[args.command](args) or 0  # commands return None, or an exit code (doctor --strict)
        except HybridRLError as e:
            print(f"{name}: error: {e}", file=sys.stderr)
            return 2
        except (Interrupted, KeyboardInterrupt) as e:
            kill_descendants()  # anything the command's cleanup left behind goes with it
            print(f"{name}: {getattr(e, 'message', None) or interrupted_message()}", file=sys.stderr)
            return EXIT_CODE
        except Exception:
            if not stopping():  # a bug: its traceback is what a report needs
                raise
            kill_descendants()  # the stop-at-once, turned into another error by a C extension on its way
            print(f"{name}: {interrupted_message()}", file=sys.stderr)
            return EXIT_CODE
