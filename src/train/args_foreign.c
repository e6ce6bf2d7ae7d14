#include "train/args_foreign.h"

#include <string.h>

#define GPT2 "trident's GPT is GPT-2 (learned absolute positions, LayerNorm, GELU MLP, biases, " \
             "multi-head attention)"

/* Grouped by what the flag would do, which decides note or refusal. */
const td_foreign_group td_foreign_groups[] = {
    {.refused = 1, .why = GPT2 "; this model variant is not built",
     .names = "encoder-num-layers decoder-num-layers softmax-type window-size window-attn-skip-freq "
              "relative-attention-num-buckets relative-attention-max-distance rotary-base "
              "rotary-percent rotary-interleaved rotary-seq-len-interpolation-factor use-rope-scaling "
              "rope-scaling-factor no-rope-freq mrope-section quick-geglu activation-func-clamp-value "
              "glu-linear-offset add-qkv-bias multi-latent-attention mtp-num-layers "
              "mtp-loss-scaling-factor rope-type q-lora-rank kv-lora-rank qk-head-dim "
              "qk-pos-emb-head-dim v-head-dim rotary-scaling-factor mscale mscale-all-dim "
              "cache-mla-latents heterogeneous-layers-config-path "
              "heterogeneous-layers-config-encoded-json qk-l2-norm num-key-value-heads "
              "rotary-position-embeddings-theta embed-layernorm "
              "no-untie-embeddings-and-output-weights no-add-gate embedding-init-method-std "
              "init-method-xavier-uniform data-parallel-random-init padded-vocab-size spec "
              "hybrid-attention-ratio hybrid-mlp-ratio hybrid-override-pattern mamba-state-dim "
              "mamba-head-dim mamba-num-groups mamba-num-heads is-hybrid-model"},
    {.refused = 1,
     .why = "mixture of experts is not built: trident's MLP is dense (Megatron-DeepSpeed's "
            "--num-experts 1, the dense model, is accepted)",
     .names = "expert-tensor-parallel-size moe-layer-freq moe-ffn-hidden-size "
              "moe-shared-expert-intermediate-size moe-shared-expert-overlap moe-grouped-gemm "
              "moe-use-legacy-grouped-gemm moe-layer-recompute moe-extended-tp moe-use-upcycling "
              "moe-router-load-balancing-type moe-router-dtype moe-router-fusion "
              "moe-router-score-function moe-router-topk moe-router-pre-softmax "
              "moe-router-num-groups moe-router-group-topk moe-router-topk-scaling-factor "
              "moe-router-enable-expert-bias moe-router-bias-update-rate "
              "moe-router-force-load-balancing moe-router-padding-for-fp8 moe-aux-loss-coeff "
              "moe-z-loss-coeff moe-input-jitter-eps moe-per-layer-logging "
              "moe-token-dispatcher-type moe-enable-deepep moe-deepep-num-sms moe-permute-fusion "
              "moe-expert-capacity-factor moe-pad-expert-input-to-capacity moe-token-drop-policy "
              "moe-apply-probs-on-input overlap-moe-expert-parallel-comm delay-wgrad-compute "
              "moe-upcycling-granularity moe-pad-experts-for-cuda-graph-inference "
              "use-fused-weighted-squared-relu num-experts-switch num-experts-teacher"},
    {.refused = 1,
     .why = "trident trains GPT language models; this mode (BERT/T5 retrieval, vision, Retro, RL, "
            "RLHF, SFT, distillation, inference) is not built",
     .names = "retro-add-retriever retro-project-dir retro-cyclic-train-iters vision-pretraining "
              "perform-rl-step sft RLHF rlhf-train-mbs ppo-epoches actor-weight-decay "
              "critic-weight-decay actor-learning-rate critic-learning-rate "
              "actor_model_name_or_path critic_model_name_or_path max-prompt-seq-len kd kd-alpha-ce "
              "kd-beta-ce kd-temp load-teacher num-layers-teacher hidden-size-teacher "
              "num-attention-heads-teacher mos inference ds-inference use-dataset-only "
              "encoder-seq-length decoder-seq-length"},
    {.refused = 0,
     .why = "read only by Megatron's BERT, T5, retrieval, vision, Retro, RL or SFT models; no "
            "effect on GPT training, here as in Megatron",
     .names = "bert-no-binary-head onnx-safe retriever-seq-length sample-rate mask-prob "
              "short-seq-prob vocab-extra-ids ict-head-size biencoder-projection-dim "
              "biencoder-shared-query-context-model ict-load bert-load titles-data-path "
              "query-in-block-prob use-one-sent-docs evidence-data-path "
              "retriever-report-topk-accuracies retriever-score-scaling block-data-path "
              "embedding-path indexer-batch-size indexer-log-interval num-classes img-h img-w "
              "num-channels patch-dim classes-fraction data-per-class-fraction no-data-sharding "
              "head-lr-mult vision-pretraining-type vision-backbone-type swin-backbone-type "
              "mask-type mask-factor iter-per-epoch dino-local-img-size dino-local-crops-number "
              "dino-head-hidden-size dino-bottleneck-size dino-freeze-last-layer "
              "dino-norm-last-layer dino-warmup-teacher-temp dino-teacher-temp "
              "dino-warmup-teacher-temp-epochs retro-encoder-layers retro-encoder-hidden-dropout "
              "retro-encoder-attention-dropout retro-num-neighbors retro-num-retrieved-chunks "
              "retro-attention-gate retro-no-verify-neighbor-count rl-prompts-per-eval "
              "grpo-prompts-per-step grpo-group-size grpo-iterations grpo-clamp-eps-lower "
              "grpo-clamp-eps-upper grpo-kl-beta grpo-entropy-term-weight "
              "grpo-filter-groups-with-same-reward grpo-default-temperature grpo-default-top-p "
              "langrl-inference-server-type langrl-inference-server-conversation-template "
              "langrl-external-server langrl-env-config rl-offload-optimizer-during-inference "
              "rl-offload-kv-cache-during-training rl-remove-kv-cache-during-training "
              "rl-reset-cuda-graphs rl-partial-rollouts rl-inference-logprobs-is-correction "
              "rl-importance-sampling-truncation-coef rl-calculate-intra-group-similarity "
              "rl-use-sequence-packing rl-sequence-packing-bin-size rl-sequence-packing-algo "
              "sft-tokenizer-prompt-format muon-momentum muon-no-split-qkv muon-use-nesterov "
              "muon-scale-mode muon-fp32-matmul-prec muon-num-ns-steps muon-tp-mode "
              "muon-extra-scale-factor disable-mamba-mem-eff-path"},
    {.refused = 0,
     .why = "an inference setting; `trident train` runs no inference (`trident generate` and "
            "`trident serve` do)",
     .names = "inference-batch-times-seqlen-threshold max-tokens-to-oom output-bert-embeddings "
              "bert-embedder-type flash-decode use-legacy-static-engine inference-max-requests "
              "inference-max-seq-length inference-max-batch-size inference-dynamic-batching "
              "inference-dynamic-batching-buffer-size-gb inference-dynamic-batching-block-size "
              "inference-dynamic-batching-buffer-guaranteed-fraction "
              "inference-dynamic-batching-buffer-overflow-factor "
              "inference-dynamic-batching-max-requests-override "
              "inference-dynamic-batching-max-tokens-override "
              "inference-dynamic-batching-num-cuda-graphs "
              "inference-dynamic-batching-track-paused-request-events decode-only-cuda-graphs "
              "inference-dynamic-batching-unified-memory-level symmetric-ar-type "
              "nccl-all-reduce-for-prefill mlp-chunks-for-prefill disable-chunked-prefill "
              "inference-wandb-logging-step-interval inference-rng-tracker"},
    {.refused = 1,
     .why = "this parallel layout is not built: trident splits the model over "
            "--tensor-model-parallel-size (with --sequence-parallel) and equal "
            "--pipeline-model-parallel-size stages (1F1B), and shards with ZeRO stages 1-3",
     .names = "decoder-first-pipeline-num-layers decoder-last-pipeline-num-layers "
              "pipeline-model-parallel-layout num-virtual-stages-per-pipeline-rank "
              "microbatch-group-size-per-virtual-pipeline-stage "
              "account-for-embedding-in-pipeline-split account-for-loss-in-pipeline-split "
              "use-megatron-fsdp init-model-with-meta-device data-parallel-sharding-strategy "
              "use-torch-fsdp2 torch-fsdp2-no-reshard-after-forward "
              "num-distributed-optimizer-instances hierarchical-context-parallel-sizes "
              "cp-comm-type enable-zbh1-pipeline enable-zbh1-exact-semantics "
              "force-ds-sequence-parallel custom-partition custom-recompute-layers-per-stage "
              "standalone-embedding-stage enable-expert-tensor-parallelism fsdp-double-buffer "
              "suggested-communication-unit-size enable-full-sharding-in-hsdp"},
    {.refused = 1,
     .why = "lower-precision storage or arithmetic (fp8, fp4, bf16 gradients or optimizer state) "
            "is not built: trident keeps fp32 master weights, gradients and Adam state and "
            "computes in fp32, bf16 or fp16",
     .names = "fp8-format fp8-recipe fp8-margin fp8-interval fp8-amax-history-len "
              "fp8-amax-compute-algo no-fp8-wgrad fp8-param-gather fp8-e4m3 fp8-hybrid "
              "fp8-dot-product-attention fp8-multi-head-attention tp-only-amax-red "
              "first-last-layers-bf16 num-layers-at-start-in-bf16 num-layers-at-end-in-bf16 "
              "fp4-format fp4-recipe fp4-quantizer-factory fp4-param-gather "
              "reuse-grad-buf-for-mxfp8-param-ag keep-fp8-transpose-cache kitchen-config-file "
              "kitchen-recipe-number use-precision-aware-optimizer main-grads-dtype "
              "main-params-dtype exp-avg-dtype exp-avg-sq-dtype"},
    {.refused = 0,
     .why = "a GPU kernel, memory or communication setting; what trident trains does not depend "
            "on it (its own kernels and MPI collectives run, buffers sized once at start-up)",
     .names = "no-clone-scatter-output-in-embedding disable-gloo-process-groups tp-comm-overlap-cfg "
              "disable-tp-comm-overlap-ag disable-tp-comm-overlap-rs tp-comm-overlap-rs-dgrad "
              "disable-tp-comm-bulk-dgrad disable-tp-comm-bulk-wgrad tp-comm-bootstrap-backend "
              "disable-tp-comm-split-ag disable-tp-comm-split-rs "
              "pipeline-model-parallel-comm-backend high-priority-stream-groups "
              "use-te-activation-func cross-entropy-fusion-impl no-pin-cpu-grads no-pin-cpu-params "
              "no-overlap-p2p-communication overlap-p2p-communication-warmup-flush "
              "distributed-timeout-seconds-after-init defer-embedding-wgrad-compute "
              "wgrad-deferral-limit no-align-grad-reduce ddp-num-buckets "
              "ddp-pad-buckets-for-high-nccl-busbw ddp-reduce-scatter-with-fp32-accumulation "
              "ddp-average-in-collective overlap-param-gather-with-optimizer-step "
              "no-align-param-gather no-scatter-gather-tensors-in-pipeline use-ring-exchange-p2p "
              "local-rank local_rank lazy-mpu-init use-nccl-ub disable-symmetric-registration "
              "use-sharp sharp-enabled-group no-gradient-reduce-div-fusion "
              "nccl-communicator-config-path use-tp-pp-dp-mapping enable-cuda-graph "
              "cuda-graph-warmup-steps external-cuda-graph cuda-graph-impl cuda-graph-scope "
              "te-rng-tracker train-sync-interval disable-bf16-reduced-precision-matmul "
              "cpu-offloading-num-layers optimizer-cpu-offload optimizer-offload-fraction "
              "use-torch-optimizer-for-cpu-offload overlap-cpu-optimizer-d2h-h2d "
              "distribute-saved-activations recompute-modules DDP-impl "
              "no-contiguous-buffers-in-local-ddp use-contiguous-buffers-in-local-ddp "
              "disable-mem-efficient-ln mlp-layer-fusion use-fused-rmsnorm embedding-weights-in-fp32 "
              "fp16-lm-cross-entropy mmap-warmup memory-snapshot-path use-pytorch-profiler "
              "profile-ranks ds_fused_adam cpu_torch_adam scattered-embeddings split-transformers "
              "memory-centric-tiled-linear tile-factor zero-reduce-scatter "
              "zero-contigious-gradients zero-reduce-bucket-size zero-allgather-bucket-size "
              "remote-device use-pin-memory partition-method pp-delay pp-split-size "
              "deepspeed_mpi enable-experimental disable-msc"},
    {.refused = 0,
     .why = "a logger, monitor or fault-tolerance service trident does not have; the scalars go "
            "to stdout and --tensorboard-dir, and a lost rank ends the job "
            "(--distributed-timeout-minutes)",
     .names = "log-energy timing-log-option no-barrier-with-level-1-timing logging-level "
              "wandb-entity wandb-name no-one-logger one-logger-project one-logger-run-name "
              "one-logger-async app-tag-run-name app-tag-run-version config-logger-dir "
              "disable-straggler-on-startup straggler-ctrlr-port straggler-minmax-count "
              "run-workload-inspector-server enable-ft-package calc-ft-timeouts inprocess-restart "
              "inprocess-max-iterations inprocess-monitor-thread-interval "
              "inprocess-monitor-process-interval inprocess-progress-watchdog-interval "
              "inprocess-heartbeat-interval inprocess-soft-timeout inprocess-hard-timeout "
              "inprocess-heartbeat-timeout inprocess-barrier-timeout inprocess-completion-timeout "
              "inprocess-last-call-wait inprocess-termination-grace-time inprocess-granularity "
              "inprocess-active-world-size inprocess-empty-cuda-cache adlr-autoresume "
              "adlr-autoresume-interval no-log-learnig-rate-to-tensorboard "
              "result-rejected-tracker-filename test-mode error-injection-rate "
              "error-injection-type check-for-large-grads check-for-spiky-loss "
              "check-weight-hash-across-dp-replicas-interval kill-switch-file "
              "aml-data-download-path"},
    {.refused = 0,
     .why = "a PyTorch distributed-checkpoint option; trident writes Megatron's directory layout "
            "with safetensors tensors and JSON metadata, checked on load and resharded for any "
            "layout",
     .names = "use-dist-ckpt dist-ckpt-format auto-detect-ckpt-format ckpt-fully-parallel-save "
              "no-ckpt-fully-parallel-save ckpt-fully-parallel-load dist-ckpt-save-pre-mcore-014 "
              "dist-ckpt-optim-fully-reshardable distrib-optim-fully-reshardable-mem-efficient "
              "use-persistent-ckpt-worker no-strict-fsdp-dtensor-load "
              "ckpt-convert-update-legacy-dist-opt-format "
              "no-use-tokenizer-model-from-checkpoint-args no-initialization "
              "load-main-params-from-ckpt"},
    {.refused = 1,
     .why = "not built: --save writes a checkpoint every --save-interval iterations, and --load "
            "resumes from the latest one in DIR",
     .names = "persistent-save-interval non-persistent-save-interval "
              "non-persistent-ckpt-type non-persistent-global-ckpt-dir "
              "non-persistent-local-ckpt-dir non-persistent-local-ckpt-algo pretrained-checkpoint "
              "ckpt-step ckpt-convert-format ckpt-convert-save use-mp-args-from-checkpoint-args "
              "load-tag no-load-lr-state universal-checkpoint replication replication-jump "
              "replication-factor"},
    {.refused = 1,
     .why = "not built: trident reads Megatron's GPT datasets (.bin/.idx, --data-path or "
            "--train-data-path/--valid-data-path/--test-data-path, --split) with the GPT-2 or "
            "Null tokenizer",
     .names = "data-args-path per-split-data-args-path object-storage-cache-path full-validation "
              "multiple-validation-sets tokenizer-metadata tiktoken-pattern "
              "tiktoken-num-special-tokens tiktoken-special-tokens legacy-tokenizer "
              "trust-remote-code special-tokens-file train-data-exact-num-epochs "
              "return-data-index data-efficiency-curriculum-learning train-idx-path "
              "train-desc-path train-doc-idx-path train-sample-idx-path train-shuffle-idx-path "
              "repeated-dataloader random-ltd"},
    {.refused = 0,
     .why = "trident's GPT samples are whole seq-length + 1 windows without padding, so this "
            "changes nothing",
     .names = "mid-level-dataset-surplus allow-ambiguous-pad-tokens"},
    {.refused = 1,
     .why = "not built in trident's training loop (every iteration trains one global batch)",
     .names = "iterations-to-skip decrease-batch-size-if-needed"},
    {.refused = 1,
     .why = "an old flag Megatron keeps only to stop on it: use --micro-batch-size (for "
            "--batch-size), --lr-warmup-fraction/-iters/-samples (for --warmup), "
            "--tensor-model-parallel-size (for --model-parallel-size)",
     .names = "batch-size warmup model-parallel-size"},
    {.refused = 1,
     .why = "DeepSpeed's deprecated spelling: use --deepspeed with --deepspeed_config",
     .names = "deepscale deepscale_config"},
};
const int td_foreign_group_count = (int)(sizeof td_foreign_groups / sizeof *td_foreign_groups);

/* Is s[0..len) one of the space-separated words of list? */
static int in_list(const char *list, const char *s, size_t len) {
  for (const char *p = list; *p;) {
    const char *e = strchr(p, ' ');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n == len && !strncmp(p, s, len)) return 1;
    if (!e) break;
    p = e + 1;
  }
  return 0;
}

int td_foreign_find(const char *s, size_t len) {
  for (int g = 0; g < td_foreign_group_count; g++)
    if (in_list(td_foreign_groups[g].names, s, len)) return g;
  return -1;
}
