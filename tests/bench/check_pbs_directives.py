#!/usr/bin/env python3
"""Static check of the #PBS directives of PBS job scripts (PBS Pro / OpenPBS grammar, qsub(1B) and
pbs_resources(7B)), for what the emulated cluster cannot exercise (sbatch ignores ngpus, -j, place):

  - directives come before the first command (PBS stops reading them there)
  - options are known; -l select=[N:]chunk[+[N:]chunk...] with res=value chunks; place= grammar
  - walltime is [[HH:]MM:]SS; -j is oe|eo|n; -r is y|n
  - ncpus is divisible by mpiprocs (ranks get whole CPUs), select and walltime are present
  - the script cd's to $PBS_O_WORKDIR (jobs start in $HOME)

usage: check_pbs_directives.py DIR|FILE...     exit 1 naming file:line and the problem
       check_pbs_directives.py --self-test     checks that each kind of mistake is caught
"""
import os
import re
import sys
import tempfile

KNOWN_OPTS = set("NAqljroemMWvVJSCkpuhIX")
CHUNK_RES = {"ncpus", "mpiprocs", "ompthreads", "ngpus", "mem", "vmem", "host", "vnode", "arch", "naccelerators",
             "accelerator", "accelerator_model", "nodetype", "model", "gpu_type", "mpi_procs"}
PLACE_ARR = {"free", "pack", "scatter", "vscatter"}
PLACE_SHARE = {"excl", "shared", "exclhost"}
WALLTIME = re.compile(r"^(\d+:)?(\d+:)?\d+$")


def check_select(value, where, errors):
    chunks = value.split("+")
    total_nodes = 0
    for chunk in chunks:
        parts = chunk.split(":")
        n = 1
        if parts and parts[0].isdigit():
            n = int(parts[0])
            parts = parts[1:]
            if n < 1:
                errors.append(f"{where}: select chunk count must be >= 1 in '{chunk}'")
        total_nodes += n
        res = {}
        if not parts:
            errors.append(f"{where}: select chunk '{chunk}' has no resources (expected e.g. 2:ncpus=32:mpiprocs=4)")
        for p in parts:
            if "=" not in p:
                errors.append(f"{where}: '{p}' in select chunk '{chunk}' is not res=value")
                continue
            k, v = p.split("=", 1)
            if not v:
                errors.append(f"{where}: resource '{k}' in select has an empty value")
            if k not in CHUNK_RES:
                errors.append(f"{where}: unknown chunk resource '{k}' in select (known: {', '.join(sorted(CHUNK_RES))})")
            res[k] = v
        for k in ("ncpus", "mpiprocs", "ngpus", "ompthreads"):
            if k in res and not res[k].isdigit():
                errors.append(f"{where}: {k}={res[k]} is not a whole number")
        if res.get("ncpus", "").isdigit() and res.get("mpiprocs", "").isdigit():
            c, m = int(res["ncpus"]), int(res["mpiprocs"])
            if m == 0 or c % m:
                errors.append(f"{where}: ncpus={c} is not divisible by mpiprocs={m} (ranks would get partial CPUs)")
        if "mpiprocs" not in res:
            errors.append(f"{where}: select chunk '{chunk}' has no mpiprocs (PBS_NODEFILE gets one line per chunk)")
    return total_nodes


def check_place(value, where, errors):
    for p in value.split(":"):
        if p in PLACE_ARR or p in PLACE_SHARE or re.fullmatch(r"group=\w+", p):
            continue
        errors.append(f"{where}: '{p}' in place= is not an arrangement ({'|'.join(sorted(PLACE_ARR))}), "
                      f"sharing ({'|'.join(sorted(PLACE_SHARE))}) or group=resource")


def check_script(path):
    errors = []
    with open(path) as f:
        lines = f.read().splitlines()
    seen = set()
    first_command = None
    for i, line in enumerate(lines, 1):
        where = f"{path}:{i}"
        s = line.strip()
        if i == 1 and s.startswith("#!"):
            continue
        if s.startswith("#PBS"):
            if first_command is not None:
                errors.append(f"{where}: #PBS directive after the first command (line {first_command}); PBS ignores it")
            m = re.match(r"#PBS\s+-(\w)\s*(.*?)\s*(#.*)?$", s)
            if not m:
                errors.append(f"{where}: cannot parse directive '{s}'")
                continue
            opt, val = m.group(1), m.group(2)
            if opt not in KNOWN_OPTS:
                errors.append(f"{where}: unknown qsub option -{opt}")
                continue
            if opt == "l":
                for item in val.split(","):
                    if "=" not in item:
                        errors.append(f"{where}: -l '{item}' is not resource=value")
                        continue
                    k, v = item.split("=", 1)
                    if k == "select":
                        check_select(v, where, errors)
                        seen.add("select")
                    elif k == "place":
                        check_place(v, where, errors)
                    elif k == "walltime":
                        if not WALLTIME.match(v):
                            errors.append(f"{where}: walltime '{v}' is not [[HH:]MM:]SS")
                        seen.add("walltime")
                    elif k in ("nodes",):
                        errors.append(f"{where}: Torque-style nodes= (use select=N:ncpus=C:mpiprocs=P)")
            elif opt == "j" and val not in ("oe", "eo", "n"):
                errors.append(f"{where}: -j '{val}' must be oe, eo or n")
            elif opt == "r" and val not in ("y", "n"):
                errors.append(f"{where}: -r '{val}' must be y or n")
            elif opt == "N" and not re.fullmatch(r"[A-Za-z][\w.-]{0,235}", val):
                errors.append(f"{where}: job name '{val}' must start with a letter (letters, digits, _ . -)")
            elif opt in "Aq" and not val:
                errors.append(f"{where}: -{opt} needs a value")
            continue
        if not s or s.startswith("#"):
            continue
        if first_command is None:
            first_command = i
    for need in ("select", "walltime"):
        if need not in seen:
            errors.append(f"{path}: no '#PBS -l {need}=...' directive")
    if not any(re.search(r'cd\s+"?\$\{?PBS_O_WORKDIR', l) for l in lines):
        errors.append(f"{path}: never cd's to $PBS_O_WORKDIR (PBS jobs start in $HOME)")
    return errors


def scripts_in(args):
    for a in args:
        if os.path.isdir(a):
            for name in sorted(os.listdir(a)):
                if name.endswith(".pbs"):
                    yield os.path.join(a, name)
        else:
            yield a


def self_test():
    good = "#!/bin/bash\n#PBS -N ok\n#PBS -l select=2:ncpus=8:mpiprocs=4\n#PBS -l walltime=00:10:00\n#PBS -j oe\n" \
           "cd \"$PBS_O_WORKDIR\"\necho hi\n"
    bad = {
        "late directive": good + "#PBS -q late\n",
        "ncpus/mpiprocs": good.replace("ncpus=8", "ncpus=6"),
        "walltime": good.replace("00:10:00", "10 minutes"),
        "select grammar": good.replace("select=2:ncpus=8:mpiprocs=4", "select=2:ncpus"),
        "unknown resource": good.replace("mpiprocs=4", "mpiprocs=4:gpuz=1"),
        "-j value": good.replace("-j oe", "-j yes"),
        "no workdir": good.replace('cd "$PBS_O_WORKDIR"\n', ""),
        "no select": good.replace("#PBS -l select=2:ncpus=8:mpiprocs=4\n", ""),
        "place": good + "",
    }
    bad["place"] = good.replace("#PBS -j oe", "#PBS -j oe\n#PBS -l place=spread")
    failures = 0
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "good.pbs")
        open(p, "w").write(good)
        if check_script(p):
            print("self-test: the good script was rejected:", check_script(p))
            failures += 1
        for what, text in bad.items():
            p = os.path.join(d, "bad.pbs")
            open(p, "w").write(text)
            errs = check_script(p)
            print(f"self-test: {what}: {'caught: ' + errs[0] if errs else 'NOT CAUGHT'}")
            failures += not errs
    return 1 if failures else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) < 2:
        print(__doc__)
        return 2
    files = list(scripts_in(argv[1:]))
    if not files:
        print("check_pbs_directives: no .pbs scripts found in", argv[1:])
        return 1
    errors = []
    for f in files:
        e = check_script(f)
        errors += e
        print(f"{f}: {'OK' if not e else str(len(e)) + ' problem(s)'}")
    for e in errors:
        print("  " + e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
