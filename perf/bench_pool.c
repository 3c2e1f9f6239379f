/* perf/bench_pool.c — placeholder while the benchmark is written. */
int main(void)
{
	return 0;
}
