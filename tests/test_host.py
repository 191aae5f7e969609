"""What benchmark results say of the machine: edgespec.host.cpu_name (pure logic over a
/proc/cpuinfo text)."""

from __future__ import annotations

from edgespec.host import cpu_name, usable_cpus

XEON = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_int8 avx_vnni

processor\t: 1
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_int8 avx_vnni
"""


def test_cpu_name_says_family_model_the_matrix_and_vector_features_and_the_cpus(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(XEON)
    n = usable_cpus()
    assert cpu_name(info) == f"Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz (family 6 model 143; AVX-512 VNNI, AVX-512 BF16, AMX-INT8, AVX-VNNI), {n} vCPUs"
    info.write_text("model name\t: Some CPU\ncpu family\t: 25\nmodel\t\t: 1\nflags\t\t: fpu avx2\n")
    assert cpu_name(info) == f"Some CPU (family 25 model 1; AVX2), {n} vCPUs"  # no AVX-512: the 256-bit path
    info.write_text("processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\n")  # Arm's /proc/cpuinfo has no model name
    assert cpu_name(info).endswith(f", {n} vCPUs") and not cpu_name(info).startswith(" ")
    assert cpu_name(tmp_path / "missing")  # no /proc/cpuinfo: the platform's own name
