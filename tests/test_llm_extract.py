"""Code extraction from completions: fences, several kernels, missing fences, nothing usable."""

from __future__ import annotations

from cudanalyst.runner.llm.extract import extract_kernel, fenced_blocks

K1 = "__global__ void k1(float* a) { a[threadIdx.x] = 1.0f; }"
K2 = "__global__ void k2(float* a) { if (threadIdx.x < 4) { a[threadIdx.x] = 2.0f; } }"
LAUNCH = 'extern "C" __constant__ int LAUNCH_k1[6] = {1, 1, 1, 32, 1, 1};'


def fence(code: str, lang: str = "cuda") -> str:
    return f"```{lang}\n{code}\n```\n"


def test_single_fenced_block_is_taken_verbatim() -> None:
    ex = extract_kernel("Here is the kernel:\n" + fence(K1) + "It writes ones.")
    assert ex.ok and ex.method == "fenced" and ex.language == "cuda"
    assert ex.code == K1 + "\n"
    assert ex.kernels == 1 and ex.notes == []


def test_last_revision_wins_when_blocks_redefine_the_same_kernel() -> None:
    v1 = K1.replace("1.0f", "3.0f")
    ex = extract_kernel("First try:\n" + fence(v1) + "Better:\n" + fence(K1), ["k1"])
    assert ex.code == K1 + "\n"
    assert any("2 blocks define kernels" in n for n in ex.notes)


def test_kernels_of_a_task_split_over_blocks_are_combined_in_order() -> None:
    ex = extract_kernel(fence(K1) + "and the second kernel:\n" + fence(K2), ["k1", "k2"])
    assert ex.ok and ex.kernels == 2
    assert ex.code is not None and ex.code.index("k1(") < ex.code.index("k2(")


def test_several_kernels_in_one_block_stay_together() -> None:
    ex = extract_kernel(fence(K1 + "\n" + K2), ["k1", "k2"])
    assert ex.kernels == 2 and ex.notes == []


def test_missing_kernel_name_is_noted_but_code_kept() -> None:
    ex = extract_kernel(fence(K1), ["k1", "k2"])
    assert ex.ok and any("kernels not found: k2" in n for n in ex.notes)


def test_helper_and_launch_blocks_are_kept() -> None:
    helper = "__device__ float twice(float x) { return 2 * x; }"
    ex = extract_kernel(fence(helper) + fence(K1) + fence(LAUNCH, "cpp"), ["k1"])
    assert ex.code is not None
    assert ex.code.index("twice") < ex.code.index("k1(") < ex.code.index("LAUNCH_k1")


def test_non_code_fences_are_ignored() -> None:
    ex = extract_kernel(fence("pip install foo", "bash") + fence(K1))
    assert ex.code == K1 + "\n" and ex.blocks == 2


def test_tilde_fences_and_plain_fences() -> None:
    assert extract_kernel(f"~~~\n{K1}\n~~~\n").code == K1 + "\n"
    assert extract_kernel(f"```\n{K1}\n```").code == K1 + "\n"


def test_unclosed_fence_is_used_and_noted() -> None:
    ex = extract_kernel("```cuda\n" + K1[:-1])  # cut short by maxTokens
    assert ex.ok and ex.method == "unclosed-fence"
    assert any("not closed" in n for n in ex.notes)


def test_missing_fences_take_the_code_lines_only() -> None:
    text = f"Sure, here it is.\n#include <cuda.h>\n#define N 4\n{K1}\n{LAUNCH}\nThat is all.\n"
    ex = extract_kernel(text, ["k1"])
    assert ex.method == "unfenced"
    assert ex.code == f"#include <cuda.h>\n#define N 4\n{K1}\n{LAUNCH}\n"


def test_kernel_outside_fences_when_fences_hold_none() -> None:
    ex = extract_kernel(fence("make run", "bash") + "\n" + K1 + "\n")
    assert ex.method == "unfenced" and ex.code == K1 + "\n"


def test_no_usable_code_gives_a_reason() -> None:
    for text, words in [
        ("", "empty completion"),
        ("   \n", "empty completion"),
        (None, "empty completion"),
        ("I would use shared memory.", "no code block"),
        (fence("print(1)", "python"), "none defines"),
        ("__global__ void k(float* a) { a[0] = 1;", "never closes"),
    ]:
        ex = extract_kernel(text)
        assert not ex.ok and ex.method == "none"
        assert ex.reason is not None and words in ex.reason, (text, ex.reason)


def test_braces_in_comments_and_strings_do_not_end_the_kernel() -> None:
    body = '__global__ void k(char* s) { // } not the end\n  const char* t = "}"; /* } */ s[0] = t[0]; }'
    ex = extract_kernel(body + "\nDone.")
    assert ex.code == body + "\n"


def test_fenced_blocks_parser_keeps_order_and_languages() -> None:
    blocks = fenced_blocks(fence("a", "c") + "x\n" + fence("b", "CUDA"))
    assert [(b.language, b.code, b.closed) for b in blocks] == [("c", "a\n", True), ("cuda", "b\n", True)]
