"""precision=auto: a type per GEMM under the gate (make), its search (search) over weight
variants (variants, graphs) by bytes against sensitivity (tradeoff) for a stated objective
(objective), and the record it leaves (record). Enter by make."""
