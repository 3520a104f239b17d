"""idx_subset.py SRC DST NTRAIN NTEST - the first NTRAIN training and NTEST
test samples of the IDX files in SRC (train-/t10k- images and labels),
written to DST (created) with the counts in their headers. The elastic
tests (test_elastic.sh, test_elastic_partition.sh) and bench/elastic.sh
train on such a subset: more epochs in the same time."""
import os
import struct
import sys

src, dst, ntr, nte = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
os.makedirs(dst, exist_ok=True)
for name, k in (("train-images-idx3-ubyte", ntr), ("train-labels-idx1-ubyte", ntr),
                ("t10k-images-idx3-ubyte", nte), ("t10k-labels-idx1-ubyte", nte)):
    b = open(os.path.join(src, name), "rb").read()
    nd = b[3]
    dims = struct.unpack(">" + "I" * nd, b[4:4 + 4 * nd])
    if k > dims[0]:
        sys.exit("%s: %d samples, %d asked for" % (name, dims[0], k))
    per = 1
    for d in dims[1:]:
        per *= d
    hdr = b[:4] + struct.pack(">I", k) + b[8:4 + 4 * nd]
    open(os.path.join(dst, name), "wb").write(hdr + b[4 + 4 * nd:4 + 4 * nd + k * per])
