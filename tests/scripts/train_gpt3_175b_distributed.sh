#!/bin/bash
# TEST FIXTURE, not trident code: Megatron-LM's GPT-3 175B example script, run by
# tests/cli_example_scripts.sh at tiny sizes. Arguments as published: checkpoint
# path, TensorBoard path, vocab file, merge file, data prefix. Environment:
# TRIDENT (the binary).
# Source: NVIDIA/Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh at commit
# 157006d6d9bf4f55c0d4d7dacbd2b65e7bd84dc9 (the version the search tool returns).
# Everything below the header is the script as published except these lines:
#   sizes: --num-layers 96 -> 2; --hidden-size 12288 -> 64;
#     --num-attention-heads 96 -> 4; --seq-length 2048 -> 64;
#     --max-position-embeddings 2048 -> 64; --global-batch-size 1536 -> 4;
#     --rampup-batch-size 16 16 5859375 -> 2 2 16; --train-iters 500000 -> 100
#     (--log-interval 100 is a literal and is kept: 100 iterations give one log
#     line); --tensor-model-parallel-size 8 -> 2;
#     --pipeline-model-parallel-size 16 -> 1
#   launcher: GPUS_PER_NODE=8 -> 2; `torchrun ${DISTRIBUTED_ARGS[@]}
#     examples/classes/pretrain_gpt.py` -> `mpirun -np $GPUS_PER_NODE
#     --oversubscribe --allow-run-as-root ${TRIDENT} train`

# Runs the "175B" parameter model

export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=2
# Change for multinode config
MASTER_ADDR=localhost
MASTER_PORT=6000
NUM_NODES=1
NODE_RANK=0
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))

CHECKPOINT_PATH=$1 #<Specify path>
TENSORBOARD_LOGS_PATH=$2 #<Specify path>
VOCAB_FILE=$3 #<Specify path to file>/gpt2-vocab.json
MERGE_FILE=$4 #<Specify path to file>/gpt2-merges.txt
DATA_PATH=$5 #<Specify path and file prefix>_text_document

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE 
    --nnodes $NUM_NODES 
    --master_addr $MASTER_ADDR 
    --master_port $MASTER_PORT
)

GPT_MODEL_ARGS=(
    --num-layers 2 
    --hidden-size 64 
    --num-attention-heads 4 
    --seq-length 64 
    --max-position-embeddings 64 
    --attention-backend auto # Can use (flash/fused/unfused/local)
)

TRAINING_ARGS=(
    --micro-batch-size 1 
    --global-batch-size 4 
    --rampup-batch-size 2 2 16 
    --train-iters 100 
    --weight-decay 0.1 
    --adam-beta1 0.9 
    --adam-beta2 0.95 
    --init-method-std 0.006 
    --clip-grad 1.0 
    --fp16
    --lr 6.0e-5 
    --lr-decay-style cosine 
    --min-lr 6.0e-6
    --lr-warmup-fraction .001 
    --lr-decay-iters 430000 
)

MODEL_PARALLEL_ARGS=(
	--tensor-model-parallel-size 2 
	--pipeline-model-parallel-size 1 
)

DATA_ARGS=(
    --data-path $DATA_PATH 
    --vocab-file $VOCAB_FILE 
    --merge-file $MERGE_FILE 
    --split 949,50,1
)

EVAL_AND_LOGGING_ARGS=(
    --log-interval 100
    --save-interval 10000 
    --eval-interval 1000 
    --save $CHECKPOINT_PATH 
    --load $CHECKPOINT_PATH 
    --eval-iters 10
    --tensorboard-dir $TENSORBOARD_LOGS_PATH 
)

mpirun -np $GPUS_PER_NODE --oversubscribe --allow-run-as-root ${TRIDENT} train \
    ${GPT_MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DATA_ARGS[@]} \
    ${EVAL_AND_LOGGING_ARGS[@]}
