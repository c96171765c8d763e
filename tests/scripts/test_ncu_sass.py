#!/usr/bin/env python3
"""scripts/gpu/ncu_sass.py on made-up Nsight Compute source pages: both column-name styles, several kernels and
launches, predicated and label rows, the listing, and input without SASS; and scripts/gpu/ncu_reports.sh (what
device.sh does with a run's reports) over a stand-in ncu."""
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import unittest
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "gpu", "ncu_sass.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import ncu_sass  # noqa: E402

# Newer Nsight Compute: long metric names for the stall reasons, thousands separators.
LONG = '''"Kernel Name","void gemm_v3_kernel<bf16_t, Cfg<256, 4>>(Params)"
"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","Instructions Executed","smsp__pcsamp_warps_issue_stalled_wait","smsp__pcsamp_warps_issue_stalled_no_instructions","smsp__pcsamp_warps_issue_stalled_long_scoreboard","smsp__pcsamp_warps_issue_stalled_wait_not_issued"
"0x7f00","MOV R1, c[0x0][0x28]","10","5","1,024","10","0","0","5"
"0x7f10",".L_x_3:","","","","","","",""
"0x7f20","@!P0 SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR4], R0","600","590","65,536","0","0","600","590"
"0x7f30","HGMMA.64x256x16.F32.BF16 R24, gdesc[UR8], R24, gsb0","300","10","262,144","300","0","0","10"
"0x7f40","STG.E.128 desc[UR6][R2.64], R4","90","90","8,192","0","90","0","90"
"Kernel Name","void gemm_v3_kernel<bf16_t, Cfg<256, 4>>(Params)"
"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","Instructions Executed","smsp__pcsamp_warps_issue_stalled_wait","smsp__pcsamp_warps_issue_stalled_no_instructions","smsp__pcsamp_warps_issue_stalled_long_scoreboard","smsp__pcsamp_warps_issue_stalled_wait_not_issued"
"0x7f00","MOV R1, c[0x0][0x28]","1","1","1,024","1","0","0","1"
"0x7f20","@!P0 SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR4], R0","2","2","65,536","0","0","2","2"
"Kernel Name","void conv_v3_kernel<bf16_t>(Params)"
"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","Instructions Executed","smsp__pcsamp_warps_issue_stalled_wait","smsp__pcsamp_warps_issue_stalled_no_instructions","smsp__pcsamp_warps_issue_stalled_long_scoreboard","smsp__pcsamp_warps_issue_stalled_wait_not_issued"
"0x10","LDS.128 R4, [R2]","5","5","100","5","0","0","5"
"0x20","EXIT","0","0","100","0","0","0","0"
'''

# Older style: one unnamed kernel, short stall names, "# Samples".
SHORT = '''"Address","Source","# Samples","Instructions Executed","stall_long_sb","stall_no_inst"
"0x0","IMAD R0, R1, R2, R3","3","40","1","2"
"0x10","BRA 0x0","1","40","0","1"
'''


# Loops: a backward branch to a label (the k loop, with the MMAs) and one to an address.
LOOPS = '''"Kernel Name","void gemm_v3_kernel<loop>"
"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed"
"0x0000","MOV R1, c[0x0][0x28]","5","10"
"",".L_x_1:","",""
"0x0010","SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR4], R0","40","640"
"0x0020","HGMMA.64x256x16.F32.BF16 R24, gdesc[UR8], R24, gsb0","30","640"
"0x0030","@P0 BRA `(.L_x_1)","5","640"
"0x0040","STG.E.128 desc[UR6][R2.64], R4","15","100"
"0x0050","@P1 BRA 0x40","5","100"
"0x0060","EXIT","0","10"
'''


def run(text, *extra):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.source.csv")
        with open(path, "w") as f:
            f.write(text)
        listing = os.path.join(d, "listing.txt")
        out = io.StringIO()
        with redirect_stdout(out):
            rc = ncu_sass.main([path, "--listing", listing, *extra])
        lst = ""
        if os.path.exists(listing):
            with open(listing) as f:
                lst = f.read()
        return rc, out.getvalue(), lst


class Summary(unittest.TestCase):
    def test_long_names_launches_and_hot_spots(self):
        rc, out, lst = run(LONG)
        self.assertEqual(rc, 0)
        gemm, conv = out.split("kernel: ")[1:]
        # the most-sampled of the two launches of the GEMM kernel, the label row left out
        self.assertIn("profiled 2 times", gemm)
        self.assertIn("SASS: 4 instructions (0 KiB); executed 336,896 warp instructions; 1,000 stall samples", gemm)
        # reasons in order of samples, the not-issued column not counted as a reason
        self.assertIn("stall reasons: long_scoreboard 60%, wait 31%, no_instructions 9%", gemm)
        self.assertNotIn("wait_not_issued", gemm)
        self.assertIn("executed by opcode: HGMMA 78%, SYNCS 19%, STG 2%, MOV 0%", gemm)
        hot = gemm.split("hottest instructions")[1].strip().splitlines()[1:]
        self.assertEqual(len(hot), 4)
        self.assertRegex(hot[0], r"0x7f20\s+60\.0%\s+long_scoreboard 100%\s+@!P0 SYNCS\.PHASECHK")
        self.assertRegex(hot[1], r"0x7f30\s+30\.0%\s+wait 100%\s+HGMMA")
        self.assertIn("profiled", gemm)
        self.assertNotIn("profiled", conv)
        self.assertIn("SASS: 2 instructions", conv)
        # the listing: every instruction of both kernels, with counts
        self.assertIn("# kernel: void conv_v3_kernel<bf16_t>(Params)", lst)
        self.assertRegex(lst, r"0x7f30\s+262144\s+300\s+HGMMA\.64x256x16")
        self.assertNotIn(".L_x_3", lst)

    def test_loops_split_the_samples(self):
        rc, out, _ = run(LOOPS)
        self.assertEqual(rc, 0)
        self.assertIn("loops (backward branches; 2 in all), most-sampled first:", out)
        lines = out.split("most-sampled first:")[1].strip().splitlines()
        self.assertEqual(lines[0].strip(), "0x0010..0x0030: 3 instructions, MMAs; 75% of the samples, 90% of the executed")
        self.assertEqual(lines[1].strip(), "0x0040..0x0050: 2 instructions; 20% of the samples, 9% of the executed")
        self.assertEqual(lines[2].strip(), "outside every loop: 2 instructions; 5% of the samples, 1% of the executed")
        # no backward branch, no loop lines; one to the first instruction is a loop too
        self.assertNotIn("loops", run(LONG)[1])
        self.assertIn("0x0..0x10: 2 instructions; 100% of the samples", run(SHORT)[1])  # BRA 0x0: a loop

    def test_short_names_and_top(self):
        rc, out, _ = run(SHORT, "--top", "1")
        self.assertEqual(rc, 0)
        self.assertIn("kernel: (unnamed kernel)", out)
        self.assertIn("stall reasons: no_inst 75%, long_sb 25%", out)
        self.assertEqual(len(out.split("hottest instructions")[1].strip().splitlines()), 2)  # header + 1

    def test_no_sass_is_an_error_naming_the_file(self):
        for text in ("==PROF== error: report has no source\n", ""):
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "empty.csv")
                with open(path, "w") as f:
                    f.write(text)
                r = subprocess.run([sys.executable, SCRIPT, path], capture_output=True, text=True)
                self.assertEqual(r.returncode, 2)
                self.assertIn("empty.csv holds no SASS rows", r.stderr)
        r = subprocess.run([sys.executable, SCRIPT, "/nonexistent/x.csv"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("cannot read /nonexistent/x.csv", r.stderr)


class Reports(unittest.TestCase):
    def test_rendered_summarised_and_moved(self):
        reports = os.path.join(os.path.dirname(SCRIPT), "ncu_reports.sh")
        with tempfile.TemporaryDirectory() as d:
            bench, out, bin_dir = (os.path.join(d, x) for x in ("bench", "out", "bin"))
            for x in (bench, out, bin_dir):
                os.mkdir(x)
            for name in ("gemm", "broken", "nosass", "slow"):
                with open(os.path.join(bench, name + ".ncu-rep"), "w") as f:
                    f.write("report")
            page = os.path.join(d, "page.csv")
            with open(page, "w") as f:
                f.write(LONG)
            # ncu -i REPORT --page details|source ...: the details as text, the source page as LONG; "broken" fails
            with open(os.path.join(bin_dir, "ncu"), "w") as f:
                f.write(f"""#!/bin/sh
case "$2" in *broken*) [ "$4" = source ] && {{ echo "==ERROR== no source" >&2; exit 1; }} ;; esac
case "$2" in *nosass*) [ "$4" = source ] && {{ echo "==WARNING== nothing to print"; exit 0; }} ;; esac
case "$2" in *slow*) [ "$4" = source ] && exec sleep 30 ;; esac
if [ "$4" = details ]; then echo "details of $2"; else cat {page}; fi
""")
            os.chmod(os.path.join(bin_dir, "ncu"), 0o755)
            summary = os.path.join(out, "summary.txt")
            # "slow" is larger: the archive's limit (5 headers, 4 one-block members, the end) leaves it out
            with open(os.path.join(bench, "slow.ncu-rep"), "w") as f:
                f.write("report" * 200)
            env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"], NCU_RENDER_TIMEOUT="2",
                       NCU_ARCHIVE_MAX_BYTES=str(512 * 7 + 1024))
            r = subprocess.run([reports, bench, out, summary], capture_output=True, text=True, env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(summary) as f:
                text = f.read()
            self.assertIn("SASS hot spots of gemm.ncu-rep:", text)
            self.assertRegex(text, r"0x7f20\s+60\.0%\s+long_scoreboard")
            self.assertIn("no SASS from broken.ncu-rep: ncu could not print its source page in 2 s (see "
                          "broken.source.err)", text)
            self.assertIn("no SASS from slow.ncu-rep: ncu could not print its source page in 2 s", text)
            self.assertRegex(text, r"no SASS from nosass.ncu-rep: ncu_sass.py: .*nosass.source.csv holds no SASS rows")
            self.assertEqual(sorted(os.listdir(out)), ["ncu-reports.tar", "summary.txt"])
            with tarfile.open(os.path.join(out, "ncu-reports.tar")) as t:
                self.assertEqual(sorted(t.getnames()), ["broken.ncu-rep", "gemm.ncu-rep", "nosass.ncu-rep"])
                self.assertEqual(t.extractfile("gemm.ncu-rep").read(), b"report")
            self.assertIn("slow.ncu-rep left out of ncu-reports.tar (it would pass 4608 bytes)", text)
            left = sorted(os.listdir(bench))
            self.assertEqual(left, ["broken.details.txt", "broken.source.err", "gemm.details.txt", "gemm.sass.txt",
                                    "gemm.sass_summary.txt", "nosass.details.txt", "nosass.sass_summary.txt",
                                    "nosass.source.err", "slow.details.txt", "slow.source.err"])
            with open(os.path.join(bench, "gemm.sass.txt")) as f:
                self.assertIn("HGMMA.64x256x16", f.read())
            with open(os.path.join(bench, "broken.details.txt")) as f:
                self.assertIn("details of", f.read())


if __name__ == "__main__":
    unittest.main()
