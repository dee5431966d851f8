#!/usr/bin/env python3
"""The output-drift monitor end to end on the demo decoder (trained on the King James Bible).

`llmc compile --drift-text` records the baseline from the chapters training held out; the
baseline is reproducible (two compiles give identical engines; one compile under sanitizers)
and `llmc inspect` shows it.
`llmc serve` then scores a sliding window of generated tokens against it:
  1. no score (NaN) before the window holds --drift-min-tokens tokens;
  2. prompts from other KJV chapters (in distribution, the server's default sampling): both
     PSI scores stay under the threshold, the alert gauges at 0;
  3. prompts of uniformly random token ids: a score crosses the threshold, its alert gauge goes
     to 1 and the server logs a warning;
  4. in-distribution prompts again: back under the threshold, alerts back to 0 (the window
     slides);
  5. French prompts (a language the model never saw): a score crosses the threshold.
Each phase sends at least a window's worth of tokens, so the window holds that phase alone.
Prints every score. Exit 1 on any failure."""
import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_test import DEMO, KEY, Server, check, failures  # noqa: E402

sys.path.insert(0, DEMO)
from kjv import is_held_out, read_chapters  # noqa: E402

WINDOW = 1024
MIN_TOKENS = 256
THRESHOLD = 0.25
FIRST_TOKENS = 4  # llmc compile's default --drift-new-tokens

# Written for this test: everyday French, nothing the model's Bible English resembles.
FRENCH = [
    "Le matin, nous prenons le train de huit heures pour aller au bureau en ville.",
    "Ma voisine cultive des tomates et des courgettes dans son petit jardin.",
    "Il faut composter le billet avant de monter dans le bus, sinon on paie une amende.",
    "Les enfants jouent au football dans la cour pendant la récréation de midi.",
    "Nous avons réservé une table pour quatre personnes au restaurant du coin.",
    "La réunion de lundi est reportée à jeudi après-midi, salle numéro trois.",
    "Pour le gâteau, mélangez la farine, le beurre fondu et deux œufs battus.",
    "Le musée ferme ses portes à dix-huit heures, sauf le mercredi soir.",
    "J'ai oublié mon parapluie chez le coiffeur et il pleut depuis ce matin.",
    "Le médecin m'a conseillé de marcher trente minutes chaque jour.",
]


def scores(server):
    return {s: server.metric("llmc:drift_psi", f'statistic="{s}"') for s in ("entropy", "logprob")}


def alerts(server):
    return {s: server.metric("llmc:drift_alert", f'statistic="{s}"') for s in ("entropy", "logprob")}


def send_until_window(client, prompts, label):
    """Completes prompts in turn (default sampling, seeded) until the window has seen a
    window's worth of tokens (the first FIRST_TOKENS of each response count)."""
    counted, i = 0, 0
    while counted < WINDOW + 32:
        prompt = prompts[i % len(prompts)]
        response = client.completions.create(model="demo", prompt=prompt, max_tokens=16, seed=i)
        counted += min(FIRST_TOKENS, response.usage.completion_tokens)
        i += 1
    print(f"{label}: {i} requests, {counted} tokens counted")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--llmc", required=True)
    parser.add_argument("--sanitized", action="store_true",
                        help="an ASan/UBSan build: one compile (the Release run checks that two "
                             "give the same bytes; each took about a minute under the sanitizers)")
    args = parser.parse_args()

    chapters = read_chapters()
    # Calibration: the chapters training held out and the odd chapters it saw; the prompts in
    # distribution come from the even ones.
    calibration = [c for i, c in enumerate(chapters) if is_held_out(i) or i % 2]
    trained = [c for i, c in enumerate(chapters) if not is_held_out(i) and i % 2 == 0]
    with tempfile.TemporaryDirectory() as work:
        calib = os.path.join(work, "kjv-calibration.txt")
        with open(calib, "w") as f:
            f.write("\n".join(calibration))
        engines = []
        for name in ("a",) if args.sanitized else ("a", "b"):
            engine = os.path.join(work, f"demo-{name}.engine")
            subprocess.run([args.llmc, "compile", os.path.join(DEMO, "model.onnx"), "-o", engine,
                            "--tokenizer", os.path.join(DEMO, "tokenizer.json"), "--max-context",
                            "256", "--eos-id", "0", "--generation-config",
                            os.path.join(DEMO, "generation_config.json"), "--drift-text", calib],
                           check=True)
            engines.append(engine)
        if len(engines) == 2:
            with open(engines[0], "rb") as a, open(engines[1], "rb") as b:
                check(a.read() == b.read(), "the drift baseline is reproducible (identical engines)")
        inspected = json.loads(subprocess.run([args.llmc, "inspect", engines[0], "--json"],
                                              check=True, capture_output=True, text=True).stdout)
        baseline = inspected.get("drift_baseline", {})
        print("baseline:", baseline)
        check(baseline.get("tokens", 0) >= 4000 and baseline.get("entropy_bins") == 10 and
              baseline.get("logprob_bins") == 10, "llmc inspect shows a 10-bin baseline of 4000+ tokens")

        server = Server(args.llmc, engines[0], "--model-name", "demo", "--drift-window", str(WINDOW),
                        "--drift-min-tokens", str(MIN_TOKENS), "--drift-threshold", str(THRESHOLD))
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key=KEY)
        try:
            first = scores(server)
            check(all(math.isnan(v) for v in first.values()) and
                  server.metric("llmc:drift_window_tokens") == 0 and
                  server.metric("llmc:drift_threshold") == THRESHOLD,
                  f"no score before any token: {first}")

            rng = random.Random(int(os.environ.get("DRIFT_SEED", "1")))
            # Prompts: consecutive verses (whole lines, up to 250 characters) of a chapter
            # training saw, as the baseline's prompts are whole lines of the held-out ones.
            def kjv_prompt():
                verses = rng.choice(trained).split("\n")
                start = rng.randrange(len(verses))
                prompt = verses[start]
                for verse in verses[start + 1:]:
                    if len(prompt) + 1 + len(verse) > 250:
                        break
                    prompt += "\n" + verse
                return prompt
            def phase(label, prompts, drifted):
                """Fills the window from `prompts`; then a score over the threshold with its
                alert raised (drifted), or both scores under it and no alert."""
                send_until_window(client, prompts, label)
                s, a = scores(server), alerts(server)
                print(f"{label}: PSI {s}")
                check(server.metric("llmc:drift_window_tokens") == WINDOW, f"{label}: the window is full")
                crossed = [k for k, v in s.items() if v > THRESHOLD]
                if drifted:
                    check(crossed and all(a[k] == 1 for k in crossed),
                          f"{label}: over {THRESHOLD} with the alert raised: {s} {a}")
                else:
                    check(not crossed and not any(a.values()), f"{label}: under {THRESHOLD}, no alert: {s} {a}")

            in_distribution = [kjv_prompt() for _ in range(400)]
            phase("in distribution", in_distribution, drifted=False)
            phase("random tokens", [[rng.randrange(2048) for _ in range(48)] for _ in range(400)], drifted=True)
            phase("in distribution again", in_distribution[200:], drifted=False)
            phase("French", FRENCH, drifted=True)
        finally:
            code, _, err = server.stop()
        check(code == 0, "the server exits 0")
        check("warning: output drift" in err and "is back under" in err,
              "the server logged the drift warning and the recovery")
        print("\n".join(line for line in err.splitlines() if "drift" in line))

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all drift checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
