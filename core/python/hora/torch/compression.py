"""compression.py - gradient compression for allreduce, as horovod.torch's:
Compression.none, Compression.fp16 (and Compression.bf16). hora reduces 16-bit
types in f32 and rounds once per hop (core/hora.h enum hora_dtype)."""
import torch


class Compressor:
    """compress(tensor) -> (tensor, ctx); decompress(tensor, ctx) -> tensor"""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _HalfCompressor(Compressor):
    half = torch.float16

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != cls.half:
            return tensor.to(cls.half), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.to(ctx) if ctx is not None else tensor


class FP16Compressor(_HalfCompressor):
    half = torch.float16


class BF16Compressor(_HalfCompressor):
    half = torch.bfloat16


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
