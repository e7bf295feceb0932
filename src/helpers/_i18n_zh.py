"""Chinese (简体中文) for every message the helpers' own code shows a learner.

Keys are the exact English templates passed to :func:`helpers.i18n.tr`; the ``{fields}`` of a
translation are the English template's (a test checks both, and that every ``tr("...")`` in
the helpers has an entry here). Terms follow how Chinese engineers write them: MFU, HFU, NVTX,
kernel, rank, batch and amax stay in Latin letters; roofline stays roofline, bubble 气泡,
recompute 重计算, compute-/memory-bound 计算受限 / 访存受限.
"""

MESSAGES: dict[str, str] = {
    # helpers.checks
    "✗ {what}: expected {expected}, got {got}.": "✗ {what}：期望 {expected}，实际得到 {got}。",
    " Did your function `return` its result?": " 你的函数 `return` 了结果吗？",
    "\n  Hint: {hint}": "\n  提示：{hint}",
    " (within {rtol:.0%})": "（误差 {rtol:.0%} 以内）",
    "{what}: {count} (at most {limit})": "{what}：{count}（至多 {limit}）",
    "one of {options}": "以下之一：{options}",
    "at most {limit}": "至多 {limit}",
    "a number{tolerance} ≈ {expected}": "一个数值{tolerance} ≈ {expected}",
    "✗ {what}: this hidden check has no expected value here; it is graded by `trainperf grade`.":
        "✗ {what}：这项隐藏检查在这里没有期望值；它由 `trainperf grade` 评分。",
    "This exercise asks you to compute it yourself; calling {name} is switched off while it is graded.":
        "这道练习要求你自己计算；评分期间调用 {name} 已被关闭。",
    "{name} is exercise {exercise}: write it yourself.": "{name} 是练习 {exercise}：请自己写出它。",
    # trainperf grade: the feedback the grader writes for a visible check
    "✗ {what}: expected {expected}.": "✗ {what}：期望 {expected}。",
    "the cell ran past the time limit": "这个单元格超出了时间限制",
    "(the message is not shown in graded feedback; run the test cell in your notebook to see it)":
        "（评分反馈中不显示错误信息；请在你的笔记本中运行这个测试单元格查看）",
    # trainperf grade: a Chinese submission's feedback
    "hidden tests: {failed} of {total} checks failed (details are not shown)":
        "隐藏测试：{total} 项检查中有 {failed} 项未通过（不显示细节）",
    "some": "若干",
    # helpers.setup
    "helpers {version} · torch {torch} · Python {python} · device: {device}":
        "helpers {version} · torch {torch} · Python {python} · 设备：{device}",
    "GPU {gpu} -> table entry '{entry}': dense peak TFLOP/s {peaks}; bandwidth {bandwidth:g} TB/s ({source})":
        "GPU {gpu} -> 硬件表条目“{entry}”：稠密峰值 TFLOP/s {peaks}；带宽 {bandwidth:g} TB/s（{source}）",
    "GPU {gpu} is not in helpers.hardware.DEVICES: no datasheet peak; use measured figures "
    "(helpers.hardware.measure_device()).":
        "GPU {gpu} 不在 helpers.hardware.DEVICES 中：没有数据手册峰值；请使用实测数值"
        "（helpers.hardware.measure_device()）。",
    "CPU run ({threads} threads): no datasheet peak for a CPU; the course measures this machine's own "
    "roofline instead.":
        "在 CPU 上运行（{threads} 个线程）：CPU 没有数据手册峰值；本课程改为实测这台机器自己的 roofline。",
    "This machine is busy: load average {load:.1f} on {cores} cores. Timings will be slower and noisier, "
    "and more speed comparisons will say 'within noise'. For cleaner numbers, stop other programs, or "
    "set torch.set_num_threads to the cores left free.":
        "这台机器很忙：{cores} 个核心上的平均负载是 {load:.1f}。计时会更慢、噪声更大，更多的速度比较会得出 "
        "'within noise'（在噪声范围内）。想得到更干净的数字，请停掉其他程序，或者用 torch.set_num_threads "
        "把线程数设为空闲的核心数。",
    # helpers.roofline
    "ridge {ridge:.0f} FLOP/B": "拐点 {ridge:.0f} FLOP/B",
    "arithmetic intensity (FLOP/byte)": "算术强度（FLOP/字节）",
    "attainable TFLOP/s": "可达 TFLOP/s",
    "compute-bound": "计算受限",
    "memory-bound": "访存受限",
    "<b>{name}</b>: peak {peak:g} TFLOP/s, bandwidth {bw:g} GB/s, {b:g} bytes per element":
        "<b>{name}</b>：峰值 {peak:g} TFLOP/s，带宽 {bw:g} GB/s，每个元素 {b:g} 字节",
    "Roofline explorer ({name}, M={M}, {bound})": "Roofline 模型探索器（{name}，M={M}，{bound}）",
    "Roofline": "Roofline 模型",
    "custom roofs": "自定义屋顶",
    "roofline": "roofline",
    "device": "设备",
    "bytes/elem": "字节/元素",
    "peak TF/s": "峰值 TF/s",
    "BW TB/s": "带宽 TB/s",
    "M={M}: I = {intensity:.1f} FLOP/B, F/peak = {compute:.4f} ms, Q/BW = {memory:.4f} ms, "
    "ideal ≥ {ideal:.4f} ms, {bound}, ≤ {attainable:.1f} TFLOP/s":
        "M={M}：I = {intensity:.1f} FLOP/B，F/peak = {compute:.4f} ms，Q/BW = {memory:.4f} ms，"
        "理想时间 ≥ {ideal:.4f} ms，{bound}，≤ {attainable:.1f} TFLOP/s",
    # helpers.nsys
    "ms from the start of the step": "距该步开始的时间（ms）",
    " (EXAMPLE data, synthetic)": "（示例数据，合成）",
    "GPU kernels": "GPU kernel",
    "NVTX step {step}": "NVTX 第 {step} 步",
    # helpers.timeline
    "compute": "计算",
    "comm": "通信",
    "data": "数据加载",
    "other": "其他",
    "step": "步",
    "time from the first profiled step (ms); steps are the outlined bands on top":
        "距第一个 profiled step 开始的时间（ms）；顶部带边框的条带是各个步",
    "timeline": "时间线",
    "time (units of one forward)": "时间（以一次前向为单位）",
    "{schedule}: {stages} stages × {microbatches} microbatches, bubble {bubble:.0%}":
        "{schedule}：{stages} 个阶段 × {microbatches} 个微批次，气泡 {bubble:.0%}",
    "stage {stage}": "阶段 {stage}",
    # helpers.memory
    "time (ms)": "时间（ms）",
    "allocated (MiB)": "已分配（MiB）",
    "CUDA memory over one step": "一个训练步内的 CUDA 显存",
    "allocated": "已分配",
    "peak {mib:,.0f} MiB": "峰值 {mib:,.0f} MiB",
    "GB per GPU (10⁹ bytes)": "每个 GPU 的 GB（10⁹ 字节）",
    "parameters": "参数",
    "gradients": "梯度",
    "optimizer state": "优化器状态",
    "master weights": "主权重",
    "activations": "激活值",
    "logits": "logits",
    "{model} · batch {batch} × seq {seq} · {precision} · {optimizer} · ZeRO-{stage} × {dp} ranks · "
    "{attention} attention · recompute {recompute}":
        "{model} · batch {batch} × 序列 {seq} · {precision} · {optimizer} · ZeRO-{stage} × {dp} 个 rank · "
        "{attention} 注意力 · 重计算 {recompute}",
    "Memory explorer ({title}): {total:,.2f} GB per GPU vs {device} {capacity:g} GB":
        "显存探索器（{title}）：每个 GPU {total:,.2f} GB，对比 {device} {capacity:g} GB",
    "fits, {room:,.1f} GB to spare": "放得下，还剩 {room:,.1f} GB",
    "does NOT fit: {over:,.1f} GB over": "放不下：超出 {over:,.1f} GB",
    "model": "模型",
    "precision": "精度",
    "optimizer": "优化器",
    "recompute": "重计算",
    "attention": "注意力",
    "batch": "batch",
    "seq_len": "序列长度",
    "ZeRO stage": "ZeRO 阶段",
    "DP ranks": "DP rank 数",
    "peak per GPU {total:,.2f} GB, {moment} ({parts} GB) on {device} ({capacity:g} GB, datasheet): "
    "{verdict}":
        "{device}（{capacity:g} GB，数据手册）上每个 GPU 的峰值为 {total:,.2f} GB，"
        "出现在{moment}（{parts} GB）：{verdict}",
    "when the backward pass starts": "反向传播开始时",
    "in the optimizer step": "优化器 step 中",
    "temporaries": "临时张量",
    "overhead (assumed)": "额外开销（假设值）",
    "overhead GB": "额外开销 GB",
    # helpers.precision
    "magnitude": "绝对值",
    "delayed scaling: x = the step overflowed": "延迟缩放：x = 该步溢出",
    "block of 32 values": "块序号（每块 32 个值）",
    "mean relative error": "平均相对误差",
    "fp8 e4m3 round trip: per-tensor scale vs MX block scales":
        "fp8 e4m3 往返转换：逐张量缩放 vs MX 逐块缩放",
    "amax of the step": "该步的 amax",
    "largest amax that fits: {label}": "能容纳的最大 amax：{label}",
    "training loss": "训练损失",
    "bf16 vs fp32 on {device}": "{device} 上的 bf16 vs fp32",
    "fp32 vs mixed precision": "fp32 vs 混合精度",
    "training step {key}": "训练步 {key}",
    "{key} roof (datasheet)": "{key} 屋顶（数据手册）",
    "{key} roof (measured)": "{key} 屋顶（实测）",
    # helpers.report
    "step time, ms (median, min–max)": "step 时间，ms（中位数，最小–最大）",
    "% of the precision's peak": "占该精度峰值的 %",
    "{experiment} — grey: reverted": "{experiment} — 灰色：已回退",
    "MiB (CUDA peak allocated)": "MiB（CUDA 已分配显存的峰值）",
    "MiB (saved for backward)": "MiB（为反向传播保存）",
}

