/*
 * The program of every layer link check (ARCHITECTURE.md): linked with the
 * whole of one part's library and only the libraries that part may use, so a
 * call to a function of any other part fails the link.
 */
int main(void)
{
    return 0;
}
