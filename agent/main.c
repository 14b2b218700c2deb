/* placeholder, replaced by the controller */
int main(void) { return 0; }
