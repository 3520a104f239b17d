/* absent.c - a test fixture built as libhora_test_absent_link.so with the
 * soname libhora_test_absent.so.1, which no file has (the two names differ on
 * purpose): a library linked against it
 * (fake_gpu.c with FAKE_NEEDS_ABSENT) records that NEEDED name and then
 * fails to load, as libhora_gpu.so does where libcudart.so.13 is missing. */
__attribute__((visibility("default"))) int hora_test_absent(void);

int hora_test_absent(void)
{
	return 7;
}
