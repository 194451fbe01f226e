"""torch.distributed data parallelism below the roles: dp.py (process groups, global loss normalisation,
the gradient all-reduce) and sharding.py (ddp replicas or FSDP2 shards). The workers use them in one
process or many; the Ray side (distributed/) only starts the processes that call them."""
